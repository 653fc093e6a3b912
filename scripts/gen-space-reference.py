#!/usr/bin/env python3
"""Writes the space.json reference (Markdown) from its JSON Schema.

Reads search/space.schema.json, the schema `hpsearch schema` prints and
editors validate with, and writes one section per top-level key of
space.json: its description, a table of its fields (type and rule, default,
meaning) and a subsection per type of the sections whose fields depend on
their "type" (sampler, pruner, objective, a param of space) and per nested
object. So the page says exactly what the schema says and cannot drift from
it. Run by the docs build (docs/conf.py).

Links: "x-see" (a list of [text, path]) of a schema object gives its
"See also" line; the paths are relative to docs/reference/.

Usage: gen-space-reference.py SCHEMA.json OUTPUT.md
"""
import json
import os
import sys

# The order of the sections on the page (the schema's own order for others).
INT64_MAX = 2**63 - 1

SECTION_ORDER = ["study", "sampler", "pruner", "budget", "objective", "space", "warm_start",
                 "artifacts"]


class Writer:
    def __init__(self, schema):
        self.schema = schema
        self.out = []
        self.rendered = {}  # $ref -> the title of the section that shows it

    def resolve(self, s):
        """The schema `s` with its $ref followed (siblings of the $ref win)."""
        while isinstance(s, dict) and "$ref" in s:
            ref = s["$ref"]
            if not ref.startswith("#/$defs/"):
                sys.exit(f"gen-space-reference: unsupported $ref {ref}")
            target = self.schema["$defs"][ref[len("#/$defs/"):]]
            merged = dict(target)
            merged.update({k: v for k, v in s.items() if k != "$ref"})
            s = merged
        return s

    # ------------------------------------------------------------ cells

    def value_text(self, s):
        """What a field takes, in words: "integer >= 1", "`a` or `b`"."""
        s = self.resolve(s)
        if "const" in s:
            return f"`{json.dumps(s['const'])}`"
        if "enum" in s:
            return " or ".join(f"`{json.dumps(v)}`" for v in s["enum"])
        if "anyOf" in s:
            return ", or ".join(self.value_text(a) for a in s["anyOf"])
        types = s.get("type")
        if types is None:
            text = "any"
        elif isinstance(types, list):
            text = ", ".join(types[:-1]) + " or " + types[-1] if len(types) > 1 else types[0]
        else:
            text = types
        rules = []
        if s.get("maximum") == INT64_MAX:  # an integer's range, not a rule of its own
            s = {k: v for k, v in s.items() if k != "maximum"}
        if "minimum" in s and "maximum" in s:
            rules.append(f"from {s['minimum']} to {s['maximum']}")
        else:
            if "minimum" in s:
                rules.append(f">= {s['minimum']}")
            if "maximum" in s:
                rules.append(f"<= {s['maximum']}")
        if "exclusiveMinimum" in s:
            rules.append(f"> {s['exclusiveMinimum']}")
        if "exclusiveMaximum" in s:
            rules.append(f"< {s['exclusiveMaximum']}")
        if s.get("minLength") == 1:
            rules.append("not empty")
        elif "minLength" in s:
            rules.append(f"at least {s['minLength']} characters")
        if "maxLength" in s:
            rules.append(f"at most {s['maxLength']} characters")
        if "minItems" in s:
            rules.append(f"at least {s['minItems']} item" + ("s" if s["minItems"] > 1 else ""))
        if types == "array" and "items" in s:
            item = self.resolve(s["items"])
            if not self.is_object_section(item):
                text = f"array of {self.value_text(item)}"
        if types == "object" and isinstance(s.get("additionalProperties"), dict):
            text = f"object of {self.value_text(s['additionalProperties'])}"
        if rules:
            text += " " + ", ".join(rules)
        return text

    @staticmethod
    def cell(text):
        return text.replace("|", "\\|").replace("\n", " ")

    def is_object_section(self, s):
        s = self.resolve(s)
        if not isinstance(s, dict):
            return False
        extra = s.get("additionalProperties")
        return ("properties" in s or "allOf" in s
                or (isinstance(extra, dict) and self.is_object_section(extra)))

    def nested(self, field):
        """(its $ref or None, the resolved schema) of each object a field's
        schema `field` holds: itself, a member of its anyOf, its items."""
        s = self.resolve(field)
        found = []
        if self.is_object_section(s):
            found.append((field.get("$ref"), s))
        for member in list(s.get("anyOf", [])) + (
                [s["items"]] if isinstance(s.get("items"), dict) else []):
            found += self.nested(member)
        return found

    # ------------------------------------------------------------ sections

    def see_also(self, s):
        links = s.get("x-see")
        if links:
            self.out.append("See also: " + ", ".join(f"[{t}]({p})" for t, p in links) + ".\n\n")

    def table(self, s, path, skip_type):
        props = s.get("properties", {})
        required = set(s.get("required", []))
        rows = []
        later = []
        for key, sub in props.items():
            # A key that a type's section only allows (true): the common
            # section describes it.
            if (skip_type and key == "type") or sub is True:
                continue
            r = self.resolve(sub)
            value = self.value_text(sub)
            for ref, obj in self.nested(sub):
                title = f"`{path}.{key}`" if path else f"`{key}`"
                if ref and ref in self.rendered:
                    value += f" (see {self.rendered[ref]})"
                else:
                    if ref:
                        self.rendered[ref] = title
                    value += f" (see {title} below)" if obj.get("properties") else ""
                    later.append((title, obj, f"{path}.{key}" if path else key))
            default = f"`{json.dumps(r['default'])}`" if "default" in r else ""
            name = f"`{key}`" + (" (required)" if key in required else "")
            rows.append(f"| {name} | {self.cell(value)} | {self.cell(default)} | "
                        f"{self.cell(r.get('description', ''))} |")
        if rows:
            self.out.append("| field | value | default | meaning |\n| --- | --- | --- | --- |\n")
            self.out.append("\n".join(rows) + "\n\n")
        return later

    def section(self, s, path, depth, title):
        s = self.resolve(s)
        self.out.append(f"{'#' * min(depth, 6)} {title}\n\n")
        if s.get("description"):
            self.out.append(s["description"] + "\n\n")
        self.see_also(s)
        dispatch = [(a["if"]["properties"]["type"], a["then"]) for a in s.get("allOf", [])
                    if "if" in a and "then" in a]
        if s.get("anyOf") and all("required" in a for a in s["anyOf"]):
            names = [f"`{a['required'][0]}`" for a in s["anyOf"]]
            self.out.append(f"At least one of {', '.join(names)} is required.\n\n")
        later = self.table(s, path, skip_type=bool(s.get("const_type")))
        if isinstance(s.get("additionalProperties"), dict) and self.is_object_section(
                s["additionalProperties"]):
            later.append((f"`{path}.<name>`", self.resolve(s["additionalProperties"]),
                          f"{path}.<name>"))
        for sub_title, obj, sub_path in later:
            self.section(obj, sub_path, depth + 1, sub_title)
        for cond, then in dispatch:
            names = [cond["const"]] if "const" in cond else cond["enum"]
            t = self.resolve(then)
            t = dict(t, const_type=True)
            self.section(t, path, depth + 1, ", ".join(f"`{n}`" for n in names))

    def page(self):
        root = self.schema
        self.out.append("<!-- Generated by scripts/gen-space-reference.py from "
                        "search/space.schema.json; do not edit. -->\n\n")
        self.out.append("## Top level\n\n" + root["description"] + "\n\n")
        required = set(root.get("required", []))
        self.out.append("| key | value | meaning |\n| --- | --- | --- |\n")
        props = root["properties"]
        keys = [k for k in SECTION_ORDER if k in props] + [
            k for k in props if k not in SECTION_ORDER]
        for key in keys:
            r = self.resolve(props[key])
            value = "object" if self.is_object_section(r) else self.value_text(props[key])
            if isinstance(r.get("type"), list):
                value = self.value_text(props[key])
            desc = r.get("description", "")
            first = desc.split(". ")[0].rstrip(".") + "." if desc else ""
            if self.is_object_section(r):
                first += f" See [{key}](#{key})."
            name = f"`{key}`" + (" (required)" if key in required else "")
            self.out.append(f"| {name} | {self.cell(value)} | {self.cell(first)} |\n")
        self.out.append("\n")
        for key in keys:  # a section refers to a top-level one (wrapped_pruner: pruner)
            if "$ref" in props[key]:
                self.rendered[props[key]["$ref"]] = f"`{key}`"
        for key in keys:
            if self.is_object_section(props[key]):
                self.section(props[key], key, 2, f"`{key}`")
        return "".join(self.out)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gen-space-reference.py SCHEMA.json OUTPUT.md")
    with open(sys.argv[1], encoding="utf-8") as f:
        schema = json.load(f)
    text = Writer(schema).page()
    os.makedirs(os.path.dirname(os.path.abspath(sys.argv[2])), exist_ok=True)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
