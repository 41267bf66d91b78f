"""The documentation check: docs/cli.md and docs/config.md against the code.

- Commands and flags come from the binary: `sampan --help` lists the commands and
  `sampan <command> --help` each command's options (CLI11's help format). Every alias of every
  option, and every positional, must appear in the first column of a flag table (a table whose
  header's first cell is "Flag") in the command's section of docs/cli.md (a section starts at a
  `## ` heading naming `sampan <command>`; the one naming `sampan` alone holds the global
  options, and -h/--help documented there counts for every command). Every flag such a first
  column names must exist.
- config.pbtxt fields come from proto/model_config.proto compiled by protoc: the server parses
  config.pbtxt with protobuf's text format into exactly that message
  (src/server/repository/model_config.cpp), so its fields are the fields the server accepts.
  Every field path from ModelConfig (`dynamic_batching.default_queue_policy.timeout_action`; the
  fields of a message-valued map's value as `parameters.value.string_value`) must appear in the
  first column of a field table (header "Field") of docs/config.md; a message type reached a
  second time, at another path, needs only that path (`output.reshape`), its fields being
  documented once. Every enum value must appear in backticks. Every path a field table's first
  column names must exist.

Run: SAMPAN_BIN=build/sampan .venv/bin/python -m pytest tests/cli/test_docs.py
"""
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from test_build_bench import sampan_bin  # $SAMPAN_BIN, the one lookup of the binary

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI_DOC = os.path.join(REPO, "docs", "cli.md")
CONFIG_DOC = os.path.join(REPO, "docs", "config.md")
CONFIG_PROTO = os.path.join(REPO, "proto", "model_config.proto")
CONFIG_ROOT = ".sampan.serverconfig.ModelConfig"



def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---- markdown --------------------------------------------------------------------------------

def split_row(line):
    """The cells of a table row (pipes escaped as \\| stay in their cell), or None."""
    s = line.strip()
    if not s.startswith("|"):
        return None
    cells = re.split(r"(?<!\\)\|", s)
    return [c.strip() for c in cells[1:-1]] if s.endswith("|") else [c.strip() for c in cells[1:]]


def is_separator(cells):
    return cells is not None and all(re.fullmatch(r":?-{3,}:?", c) for c in cells if c) and any(cells)


def first_cells(lines, header):
    """First cells of the body rows of every table in `lines` whose header's first cell is `header`."""
    out = []
    current = None
    rows = [split_row(line) for line in lines]
    for i, cells in enumerate(rows):
        if cells is None:
            current = None
            continue
        if i + 1 < len(rows) and is_separator(rows[i + 1]):
            current = cells[0] if cells else None
            continue
        if is_separator(cells):
            continue
        if current == header and cells:
            out.append(cells[0])
    return out


def sections(text):
    """{command: [lines]} for `## ` headings naming `sampan <command>` ("" for `sampan` alone)."""
    out = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            m = re.match(r"^## +`sampan(?: +([\w-]+(?: [\w-]+)*))?`\s*$", line)
            current = (m.group(1) or "") if m else None
            if current is not None:
                out[current] = []
            continue
        if current is not None:
            out[current].append(line)
    return out


FLAG_RE = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def documented_flags(cell):
    return set(FLAG_RE.findall(cell))


def documented_positionals(cell):
    return {w for w in re.findall(r"`([A-Za-z_][\w-]*)`", cell) if not w.startswith("-")}


# ---- CLI -------------------------------------------------------------------------------------

def parse_help(text):
    """(options as alias tuples, positionals, subcommands) from CLI11's --help output."""
    options, positionals, subcommands = [], [], []
    section = None
    for line in text.splitlines():
        m = re.match(r"^(Positionals|Options|Subcommands):\s*$", line)
        if m:
            section = m.group(1)
            continue
        # Items are indented by two spaces; wrapped descriptions by more.
        if not re.match(r"^  \S", line):
            if line.strip() == "":
                continue
            if not line.startswith(" "):
                section = None
            continue
        token = line.split()[0]
        if section == "Options":
            options.append(tuple(token.split(",")))
        elif section == "Positionals":
            positionals.append(token)
        elif section == "Subcommands":
            subcommands.append(token)
    return options, positionals, subcommands


def help_of(*command):
    r = subprocess.run([sampan_bin(), *command, "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"sampan {' '.join(command)} --help failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def cli():
    """{command: (options, positionals)}; "" is the root; a command's subcommands are "command sub"."""
    options, positionals, commands = parse_help(help_of())
    # Guard against a help format this parser no longer understands: the check would pass vacuously.
    assert ("-h", "--help") in options and "--version" in {a for o in options for a in o}, options
    assert {"run", "build", "bench", "serve", "perf"} <= set(commands), commands
    out = {"": (options, positionals)}
    for c in commands:
        o, p, subs = parse_help(help_of(c))
        assert o and ("-h", "--help") in o, f"no options parsed from `sampan {c} --help`"
        out[c] = (o, p)
        for s in subs:  # `sampan deploy kubernetes`
            o, p, _ = parse_help(help_of(c, s))
            assert o and ("-h", "--help") in o, f"no options parsed from `sampan {c} {s} --help`"
            out[f"{c} {s}"] = (o, p)
    assert "deploy kubernetes" in out, "the subcommands of `sampan deploy` were not found in its help"
    return out


def cli_problems(doc, cli):
    problems = []
    secs = sections(doc)
    # -h/--help, which CLI11 gives every command, is documented once, with the global options.
    shared = set()
    if "" in secs:
        shared = set().union(set(), *map(documented_flags, first_cells(secs[""], "Flag")))
    for command, (options, positionals) in cli.items():
        name = f"sampan {command}".strip()
        if command not in secs:
            problems.append(f"docs/cli.md has no section '## `{name}`'")
            continue
        cells = first_cells(secs[command], "Flag")
        flags = set().union(*map(documented_flags, cells)) if cells else set()
        words = set().union(*map(documented_positionals, cells)) if cells else set()
        actual = {a for o in options for a in o}
        for alias in sorted(actual - flags - shared):
            problems.append(f"`{name}` accepts {alias}, which docs/cli.md does not document")
        for p in positionals:
            if p not in words:
                problems.append(f"`{name}` takes the positional `{p}`, which docs/cli.md does not document")
        for flag in sorted(flags - actual):
            problems.append(f"docs/cli.md documents {flag} for `{name}`, which does not accept it")
    for extra in sorted(set(secs) - set(cli)):
        problems.append(f"docs/cli.md has a section for `sampan {extra}`, which is not a command")
    return problems


def test_cli_doc_documents_every_flag(cli):
    problems = cli_problems(read(CLI_DOC), cli)
    assert not problems, "\n".join(problems)


def test_cli_check_catches_an_undocumented_flag(cli):
    """The check can fail: drop the row of `sampan build --fp16` and it must say so."""
    doc = read(CLI_DOC)
    row = [line for line in doc.splitlines() if line.startswith("| `--fp16` |")]
    assert len(row) == 1, "docs/cli.md should have exactly one row for --fp16 (the build section)"
    problems = cli_problems(doc.replace(row[0] + "\n", ""), cli)
    assert any("`sampan build` accepts --fp16" in p for p in problems), problems
    problems = cli_problems(doc.replace("| `--version` |", "| `--versions` |"), cli)
    assert any("--versions" in p and "does not accept" in p for p in problems), problems


# ---- config.pbtxt ----------------------------------------------------------------------------

def config_schema():
    """(message descriptors by full name, enum descriptors by full name) of proto/model_config.proto."""
    protoc = shutil.which("protoc")
    if protoc is None:
        pytest.fail("protoc not found: it compiles proto/model_config.proto for this check (and for the build)")
    descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "model_config.pb")
        r = subprocess.run([protoc, "--include_imports", f"--descriptor_set_out={out}",
                            f"-I{os.path.dirname(CONFIG_PROTO)}", CONFIG_PROTO], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    messages, enums = {}, {}

    def walk(prefix, m):
        full = f"{prefix}.{m.name}"
        messages[full] = m
        for n in m.nested_type:
            walk(full, n)
        for e in m.enum_type:
            enums[f"{full}.{e.name}"] = e

    for f in fds.file:
        for m in f.message_type:
            walk(f".{f.package}", m)
        for e in f.enum_type:
            enums[f".{f.package}.{e.name}"] = e
    assert CONFIG_ROOT in messages, sorted(messages)
    return messages, enums


def config_paths(messages):
    """(paths that must be documented, every valid path)."""
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F

    required, every = [], set()
    expanded = {CONFIG_ROOT}

    def visit(type_name, prefix, first, stack):
        for f in messages[type_name].field:
            path = prefix + f.name
            every.add(path)
            if first:
                required.append(path)
            if f.type != F.TYPE_MESSAGE:
                continue
            sub, sub_prefix = f.type_name, path + "."
            if messages[sub].options.map_entry:
                value = next(x for x in messages[sub].field if x.name == "value")
                if value.type != F.TYPE_MESSAGE:
                    continue
                sub, sub_prefix = value.type_name, path + ".value."
            if sub in stack:
                continue  # a recursive message: its fields are documented where it first appears
            again = sub in expanded
            expanded.add(sub)
            visit(sub, sub_prefix, first and not again, stack | {sub})

    visit(CONFIG_ROOT, "", True, {CONFIG_ROOT})
    return required, every


@pytest.fixture(scope="module")
def schema():
    messages, enums = config_schema()
    required, every = config_paths(messages)
    values = sorted({v.name for e in enums.values() for v in e.value})
    # Guard against a schema walk that finds nothing: the check would pass vacuously.
    assert {"max_batch_size", "dynamic_batching.max_queue_delay_microseconds", "sampan.precision"} <= set(required)
    assert "TYPE_FP32" in values
    return required, every, values


def config_problems(doc, schema):
    required, every, values = schema
    problems = []
    documented = set()
    for cell in first_cells(doc.splitlines(), "Field"):
        for path in re.findall(r"`([^`]+)`", cell):
            documented.add(path)
    for path in required:
        if path not in documented:
            problems.append(f"config.pbtxt field `{path}` is accepted by the server but not documented in docs/config.md")
    for path in sorted(documented - every):
        problems.append(f"docs/config.md documents `{path}`, which is not a field of proto/model_config.proto")
    for v in values:
        if f"`{v}`" not in doc:
            problems.append(f"enum value `{v}` of proto/model_config.proto is not mentioned in docs/config.md")
    return problems


def test_config_doc_documents_every_field(schema):
    problems = config_problems(read(CONFIG_DOC), schema)
    assert not problems, "\n".join(problems)


def test_config_check_catches_an_undocumented_field(schema):
    """The check can fail: drop the row of `max_batch_size` and it must say so."""
    doc = read(CONFIG_DOC)
    row = [line for line in doc.splitlines() if line.startswith("| `max_batch_size` |")]
    assert len(row) == 1, "docs/config.md should have exactly one row for max_batch_size"
    problems = config_problems(doc.replace(row[0] + "\n", ""), schema)
    assert any("`max_batch_size`" in p and "not documented" in p for p in problems), problems
    problems = config_problems(doc.replace("| `sampan.skip_warmup` |", "| `sampan.skip_warm_up` |"), schema)
    assert any("`sampan.skip_warm_up`" in p and "not a field" in p for p in problems), problems


# ---- the pass table ---------------------------------------------------------------------------

def test_pass_table_follows_the_pipeline(tmp_path):
    """docs/cli.md lists the passes in the order the pass manager runs them (kPipeline): the
    order `sampan build --disable-pass` names them in when refusing an unknown one."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    r = subprocess.run([sampan_bin(), "build", "--onnx", str(model), "--saveEngine", str(tmp_path / "m.plan"),
                        "--disable-pass", "no_such_pass"], capture_output=True, text=True, timeout=120)
    m = re.search(r"\(passes: ([a-z_, ]+)\)", r.stderr)
    assert r.returncode != 0 and m, r.stderr
    pipeline = [p.strip() for p in m.group(1).split(",")]
    doc = read(CLI_DOC)
    table = doc[doc.index("### Passes"):]
    rows = [split_row(line) for line in table.splitlines()]
    documented = [re.sub(r"`", "", c[1]) for c in rows if c and len(c) == 3 and c[0].isdigit()]
    assert documented == pipeline, f"docs/cli.md pass table {documented} != pipeline {pipeline}"
