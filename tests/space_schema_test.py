#!/usr/bin/env python3
"""Tests of search/space.schema.json, the JSON Schema of space.json.

Run by ctest (tests/CMakeLists.txt) with Debian's python3 and its
python3-jsonschema (Draft202012Validator):

  space_schema_test.py examples SOURCE_DIR
      the schema is a valid draft 2020-12 schema (check_schema); every
      space.json under examples/ and every space.json shown in docs/ (and the
      README) validates against it; every example names the schema in its
      "$schema" key (a relative path that leads to search/space.schema.json).
  space_schema_test.py agree SOURCE_DIR SPACE_JSON_CHECK
      the schema and the C++ parser agree: every document of the fuzz corpus
      (tests/fuzz/corpus/space_json), the examples and the docs that the
      parser accepts (SPACE_JSON_CHECK, tests/tools/space_json_check.cpp), the
      schema accepts too; the documents the parser refuses but the schema
      accepts (rules a schema cannot say, such as low <= high) are counted and
      listed. The accepted documents must use every sampler, pruner,
      objective and distribution type the schema names, so that the check
      covers each one, and the schema's objective types must be those of the
      objective registry (space_json_check --objective-types). The same holds
      for 3000 mutants of these documents (one or two fields replaced, removed
      or added, from a fixed seed).
  space_schema_test.py cli SOURCE_DIR HPSEARCH
      `hpsearch schema` prints the shipped file byte for byte.
"""
import copy
import glob
import json
import os
import random
import re
import subprocess
import sys
import tempfile

import jsonschema


# Documents near the valid ones that the agreement test feeds to both.
N_MUTANTS = 3000


def schema_path(root):
    return os.path.join(root, "search", "space.schema.json")


def load_schema(root):
    with open(schema_path(root), encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def validator(schema):
    return jsonschema.Draft202012Validator(schema)


def example_files(root):
    return sorted(glob.glob(os.path.join(root, "examples", "**", "*.json"), recursive=True))


def doc_examples(root):
    """(origin, text) of each fenced JSON block of docs/ and the README that is
    a whole space.json (an object with "study", "objective" and "space")."""
    pages = sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    pages = [p for p in pages if "/_generated/" not in p] + [os.path.join(root, "README.md")]
    out = []
    for page in pages:
        with open(page, encoding="utf-8") as f:
            lines = f.read().split("\n")
        block, start = None, 0
        for i, line in enumerate(lines):
            if block is None:
                if re.match(r"^\s*```json\s*$", line):
                    block, start = [], i + 2
            elif re.match(r"^\s*```\s*$", line):
                text = "\n".join(block)
                block_doc = None
                try:
                    block_doc = json.loads(text)
                except ValueError:
                    pass
                if isinstance(block_doc, dict) and {"study", "objective", "space"} <= set(block_doc):
                    out.append((f"{os.path.relpath(page, root)}:{start}", text))
                block = None
            else:
                block.append(line)
    return out


def errors_of(v, doc):
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
            for e in sorted(v.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]


def test_examples(root):
    schema = load_schema(root)
    v = validator(schema)
    failures = []
    files = example_files(root)
    if not files:
        failures.append("no space.json under examples/")
    for path in files:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        rel = os.path.relpath(path, root)
        for e in errors_of(v, doc):
            failures.append(f"{rel}: {e}")
        ref = doc.get("$schema")
        if not isinstance(ref, str):
            failures.append(f"{rel}: no \"$schema\" key naming search/space.schema.json")
        elif os.path.normpath(os.path.join(os.path.dirname(path), ref)) != schema_path(root):
            failures.append(f"{rel}: \"$schema\": {ref!r} does not lead to search/space.schema.json")
    docs = doc_examples(root)
    if not docs:
        failures.append("no space.json example found in docs/")
    for origin, text in docs:
        for e in errors_of(v, json.loads(text)):
            failures.append(f"{origin}: {e}")
    print(f"{len(files)} examples and {len(docs)} docs examples checked against the schema")
    return failures


def type_enums(schema):
    """{section: set of the types the schema names} for the dispatched sections."""
    defs = schema["$defs"]
    return {name: set(defs[name]["properties"]["type"]["enum"])
            for name in ("sampler", "pruner", "objective", "param")}


def types_used(doc, used):
    """Adds the sampler, pruner, objective and param types of `doc` to `used`."""
    if not isinstance(doc, dict):
        return
    for section in ("sampler", "pruner", "objective"):
        s = doc.get(section)
        while isinstance(s, dict):
            if isinstance(s.get("type"), str):
                used[section].add(s["type"])
            s = s.get("wrapped_pruner") if section == "pruner" else None
    space = doc.get("space")
    if isinstance(space, dict):
        for spec in space.values():
            if isinstance(spec, dict) and isinstance(spec.get("type"), str):
                used["param"].add(spec["type"])


# Values a mutant puts in place of a field (every JSON type, the numbers and
# strings the rules of space.json turn on).
MUTANT_VALUES = [None, True, False, 0, 1, -1, 2, 0.5, 1.0, -0.5, 3.0, 100, 1e6, 1e-9, 2**53 + 1,
                 2**63, "", "x", "auto", "select", "sqrt", "linear", "sobol", "csv", "best",
                 "stdout", "persistent", "{trial_dir}/m.csv", [], [1], ["a"], {},
                 {"type": "none"}]
MUTANT_KEYS = ["seed", "step", "log", "when", "max_points", "min_resource", "metric", "mode",
               "regex", "$schema"]


def mutants(docs, n, seed):
    """`n` JSON texts, each a document of `docs` with one or two fields
    replaced (by MUTANT_VALUES), removed or added (MUTANT_KEYS), drawn from
    a fixed seed: documents near the valid ones, where a schema that is too
    strict (or a parser that is too lax) shows."""
    rng = random.Random(seed)

    def locations(d, at=()):
        yield at
        if isinstance(d, dict):
            for k, x in d.items():
                yield from locations(x, at + (k,))
        elif isinstance(d, list):
            for i, x in enumerate(d):
                yield from locations(x, at + (i,))

    out = []
    for _ in range(n):
        d = copy.deepcopy(rng.choice(docs))
        for _ in range(rng.randint(1, 2)):
            places = [p for p in locations(d) if p]
            if not places:
                break
            place = rng.choice(places)
            parent = d
            for k in place[:-1]:
                parent = parent[k]
            r = rng.random()
            if r < 0.7:
                parent[place[-1]] = copy.deepcopy(rng.choice(MUTANT_VALUES))
            elif r < 0.85 and isinstance(parent, dict):
                del parent[place[-1]]
            elif isinstance(parent, dict):
                parent[rng.choice(MUTANT_KEYS)] = copy.deepcopy(rng.choice(MUTANT_VALUES))
        out.append(json.dumps(d))
    return out


def test_agree(root, checker):
    schema = load_schema(root)
    v = validator(schema)
    corpus = sorted(glob.glob(os.path.join(root, "tests", "fuzz", "corpus", "space_json", "*")))
    # (path given to the checker, name shown, raw bytes)
    docs = []
    for path in corpus + example_files(root):
        with open(path, "rb") as f:
            docs.append((path, os.path.relpath(path, root), f.read()))
    valid = []  # the documents that are whole space.json files, for the mutants
    for _, _, raw in docs:
        try:
            valid.append(json.loads(raw.decode("utf-8")))
        except (ValueError, UnicodeDecodeError):
            pass
    with tempfile.TemporaryDirectory() as tmp:
        for i, (origin, text) in enumerate(doc_examples(root)):
            path = os.path.join(tmp, f"doc-{i}.json")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            docs.append((path, origin, text.encode("utf-8")))
            valid.append(json.loads(text))
        n_given = len(docs)
        for i, text in enumerate(mutants(valid, N_MUTANTS, seed=44)):
            path = os.path.join(tmp, f"mutant-{i}.json")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            docs.append((path, f"mutant {i}: {text}", text.encode("utf-8")))
        p = subprocess.run([checker, *(d[0] for d in docs)], capture_output=True, timeout=300)
    if p.returncode != 0:
        return [f"space_json_check exited {p.returncode}: {p.stderr.decode(errors='replace')}"]
    verdicts = {}
    for line in p.stdout.decode("utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        verdicts[parts[1]] = (parts[0], parts[2] if len(parts) > 2 else "")
    failures = []
    used = {k: set() for k in ("sampler", "pruner", "objective", "param")}
    accepted, loose = 0, []
    mutants_accepted, mutants_loose = 0, 0
    for index, (path, shown, raw) in enumerate(docs):
        mutant = index >= n_given
        if path not in verdicts:
            failures.append(f"{shown}: no verdict from space_json_check")
            continue
        verdict, reason = verdicts[path]
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            if verdict == "accept":
                failures.append(f"{shown}: the parser accepts it, Python's json does not: {e}")
            continue
        errors = errors_of(v, doc)
        if verdict == "accept" and errors:
            failures.append(f"{shown}: the parser accepts it, the schema does not: "
                            + "; ".join(errors))
        if mutant:
            mutants_accepted += verdict == "accept"
            mutants_loose += verdict != "accept" and not errors
        elif verdict == "accept":
            accepted += 1
            types_used(doc, used)
        elif not errors:
            loose.append(f"{shown}: {reason}")
    print(f"{n_given} documents: {accepted} accepted by the parser, "
          f"{n_given - accepted} refused by the parser, of which {len(loose)} the schema "
          "accepts (rules a schema cannot say):")
    for line in loose:
        print(f"  {line}")
    print(f"{N_MUTANTS} mutants of them: {mutants_accepted} accepted by the parser, "
          f"{N_MUTANTS - mutants_accepted} refused, of which {mutants_loose} the schema accepts")
    if mutants_accepted == 0:
        failures.append("no mutant is accepted by the parser: the mutants test nothing")
    p = subprocess.run([checker, "--objective-types"], capture_output=True, text=True,
                       timeout=60)
    registry = set(p.stdout.split())
    in_schema = type_enums(schema)["objective"]
    if p.returncode != 0 or not registry:
        failures.append(f"space_json_check --objective-types exited {p.returncode}")
    elif registry != in_schema:
        failures.append("the schema's objective types differ from the registry's: "
                        f"only in the registry: {sorted(registry - in_schema)}, "
                        f"only in the schema: {sorted(in_schema - registry)}")
    for section, names in type_enums(schema).items():
        missing = names - used[section]
        if missing:
            failures.append(f"no document the parser accepts uses {section} type(s) "
                            f"{', '.join(sorted(missing))}: add a corpus file that does "
                            "(tests/fuzz/corpus/space_json)")
    return failures


def test_cli(root, hpsearch):
    p = subprocess.run([hpsearch, "schema"], capture_output=True, timeout=60)
    if p.returncode != 0:
        return [f"hpsearch schema exited {p.returncode}: {p.stderr.decode(errors='replace')}"]
    with open(schema_path(root), "rb") as f:
        shipped = f.read()
    if p.stdout != shipped:
        return [f"hpsearch schema printed {len(p.stdout)} bytes that differ from "
                f"search/space.schema.json ({len(shipped)} bytes)"]
    json.loads(p.stdout)
    print(f"hpsearch schema: {len(shipped)} bytes, the shipped file")
    return []


def main():
    mode, root = sys.argv[1], os.path.abspath(sys.argv[2])
    if mode == "examples":
        failures = test_examples(root)
    elif mode == "agree":
        failures = test_agree(root, sys.argv[3])
    elif mode == "cli":
        failures = test_cli(root, sys.argv[3])
    else:
        sys.exit(f"space_schema_test: unknown mode {mode!r}")
    for f in failures:
        print(f"FAIL {f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
