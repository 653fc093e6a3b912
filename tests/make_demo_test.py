"""`make demo` installs and builds only what the demo needs.

Usage: make_demo_test.py SOURCE_DIR

Checks, without installing or building anything:
- `make -n demo` (the commands make would run) installs the packages with
  `scripts/install-deps.sh --profile demo`, configures the release build
  with the tests and benchmarks off, and builds only the hpsearch executable
  (`--target hpsearch_cli`, which builds hpsearch-torch); it runs no test;
- `make -n test` and `make -n build` still install every package (no
  profile) and build everything;
- the release build configured with the demo's flags (in a temporary
  folder) has only the hpsearch executable's commands: `all` is
  `hpsearch_cli`, and none of them builds a test or a benchmark;
- the demo profile's package list (`install-deps.sh --profile demo --list`)
  holds no package that only the tests, the docs or the benchmarks need
  (Slurm, munge, Chromium, Sphinx, Doxygen, GoogleTest, clang, Optuna...),
  and is part of the full list, which holds them.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

# Packages (or name patterns) that only tests, docs, benchmarks and the
# analysis tools need: none of them may be in the demo profile.
TEST_ONLY = [
    r"slurm.*", r"munge", r"chromium.*", r"python3-sphinx.*", r"python3-myst.*", r"doxygen",
    r"python3-breathe", r"libgtest-dev", r"libgmock-dev", r"clang.*", r"libclang.*",
    r"python3-optuna", r"python3-sklearn", r"python3-xgboost", r"python3-plotly",
    r"python3-pandas",
]

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def make_n(source, target):
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(k, None)
    out = subprocess.run(["make", "-n", "-C", source, "--no-print-directory", target],
                         capture_output=True, text=True, env=env, check=True).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def packages(source, *args):
    out = subprocess.run([os.path.join(source, "scripts", "install-deps.sh"), *args, "--list"],
                         capture_output=True, text=True, check=True).stdout
    return [p for p in out.split() if p]


def check_demo_configuration(source, configure_line):
    """Configures the release build with the demo's -D flags in a temporary
    folder and compares what `all` and `hpsearch_cli` would build."""
    flags = [a for a in shlex.split(configure_line) if a.startswith("-D")]
    build = tempfile.mkdtemp(prefix="make_demo_test_")
    try:
        cfg = subprocess.run(["cmake", "-S", source, "-B", build, "-G", "Ninja",
                              "-DCMAKE_BUILD_TYPE=Release", *flags],
                             capture_output=True, text=True)
        check(cfg.returncode == 0, "the demo's configuration succeeds" +
              ("" if cfg.returncode == 0 else ": " + cfg.stderr[-2000:]))
        if cfg.returncode != 0:
            return

        def commands(target):
            out = subprocess.run(["ninja", "-C", build, "-t", "commands", target],
                                 capture_output=True, text=True, check=True).stdout
            return [l for l in out.splitlines() if l.strip()]

        cli, everything = commands("hpsearch_cli"), commands("all")
        print(f"demo configuration: {len(cli)} commands for hpsearch_cli, {len(everything)} for all")
        check(sorted(cli) == sorted(everything),
              "the demo's configuration builds nothing besides hpsearch_cli")
        stray = [l for l in everything if re.search(r"/(tests|bench)/", l)]
        check(not stray, "the demo's configuration builds no test or benchmark" +
              (f" (builds {stray[0][:200]})" if stray else ""))
        check(any(re.search(r"-o hpsearch-torch\b", l) for l in cli),
              "the demo's build links hpsearch-torch (the LibTorch objectives)")
    finally:
        shutil.rmtree(build, ignore_errors=True)


def main():
    source = sys.argv[1]

    demo = make_n(source, "demo")
    print("make -n demo:\n  " + "\n  ".join(demo))
    deps = [l for l in demo if "install-deps.sh" in l]
    check(len(deps) == 1 and re.search(r"install-deps\.sh --profile demo\b", deps[0]),
          "make demo installs with install-deps.sh --profile demo (once)")
    configure = [l for l in demo if re.match(r"cmake --preset\b", l)]
    check(len(configure) == 1 and "-DHPSEARCH_BUILD_TESTS=OFF" in configure[0]
          and "-DHPSEARCH_BUILD_BENCH=OFF" in configure[0],
          "make demo configures without the tests and benchmarks")
    builds = [l for l in demo if re.match(r"cmake --build\b", l)]
    check(len(builds) == 1 and re.search(r"--target hpsearch_cli$", builds[0]) is not None
          and builds[0].count("--target") == 1,
          "make demo builds one target, hpsearch_cli (hpsearch and hpsearch-torch)")
    check(not any(re.search(r"\b(ctest|ninja)\b", l) for l in demo),
          "make demo runs no test and no other build")
    check(any(re.search(r"hpsearch run examples/fashion_mnist/space\.json", l) for l in demo),
          "make demo runs the demo study")

    if configure:
        check_demo_configuration(source, configure[0])

    for target in ("test", "build"):
        lines = make_n(source, target)
        deps = [l for l in lines if "install-deps.sh" in l]
        check(len(deps) >= 1 and all("--profile" not in l for l in deps),
              f"make {target} installs every package (install-deps.sh without a profile)")
    build = make_n(source, "build")
    check(any(re.match(r"cmake --build --preset release -j \d+$", l) for l in build),
          "make build builds every target")
    install = make_n(source, "install")
    check(any(re.match(r"cmake --build --preset release -j \d+$", l) for l in install)
          and any(l.startswith("cmake --install") for l in install),
          "make install builds every target, then installs")

    demo_pkgs = packages(source, "--profile", "demo")
    all_pkgs = packages(source)
    print("demo profile:", " ".join(demo_pkgs))
    bad = [p for p in demo_pkgs if any(re.fullmatch(rx, p) for rx in TEST_ONLY)]
    check(not bad, "the demo profile has no test-only package" + (f" (has {bad})" if bad else ""))
    check(set(demo_pkgs) <= set(all_pkgs), "the demo profile is part of the full list")
    for needed in ("libtorch-dev", "dataset-fashion-mnist", "cmake", "libzmq3-dev"):
        check(needed in demo_pkgs, f"the demo profile has {needed}")
    for test_only in ("slurmctld", "munge", "chromium", "libgtest-dev", "python3-sphinx",
                      "doxygen"):
        check(test_only in all_pkgs, f"the full list has {test_only}")
    bad_profile = subprocess.run(
        [os.path.join(source, "scripts", "install-deps.sh"), "--profile", "tests", "--list"],
        capture_output=True, text=True)
    check(bad_profile.returncode == 2 and "--profile must be demo or all" in bad_profile.stderr,
          "an unknown profile is refused (exit 2)")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
