"""``--json`` output against the schema written in docs/json-schema.md (read from the page
itself, so the page and the output cannot drift): with jsonschema when it is installed, and
always with the small checker below, which knows the keywords the page uses."""

import json

import pytest

from cli_helpers import DATA, doc_schema, main_in_process


def check(value, schema: dict, root: dict, where: str = "$") -> list[str]:
    """Problems of ``value`` against ``schema`` (the subset of JSON Schema the page uses)."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return check(value, root["$defs"][name], root, where)
    if "anyOf" in schema:
        if all(check(value, s, root, where) for s in schema["anyOf"]):
            return [f"{where}: matches none of anyOf"]
        return []
    problems = []
    types = schema.get("type")
    if types is not None:
        kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}

        def is_a(t):
            if t == "integer":
                return isinstance(value, int) and not isinstance(value, bool)
            if t == "number":
                return isinstance(value, (int, float)) and not isinstance(value, bool)
            return isinstance(value, kinds[t])

        if not any(is_a(t) for t in ([types] if isinstance(types, str) else types)):
            return [f"{where}: {value!r} is not of type {types}"]
    if "const" in schema and value != schema["const"]:
        problems.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} not in {schema['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{where}: {value} < {schema['minimum']}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            problems.append(f"{where}: {value} <= {schema['exclusiveMinimum']}")
    if isinstance(value, dict):
        problems += [f"{where}: missing {k!r}" for k in schema.get("required", []) if k not in value]
        if len(value) < schema.get("minProperties", 0):
            problems.append(f"{where}: fewer than {schema['minProperties']} properties")
        props, extra = schema.get("properties", {}), schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                problems += check(v, props[k], root, f"{where}.{k}")
            elif extra is False:
                problems.append(f"{where}: unexpected property {k!r}")
            elif isinstance(extra, dict):
                problems += check(v, extra, root, f"{where}.{k}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            problems.append(f"{where}: fewer than {schema['minItems']} items")
        for i, v in enumerate(value):
            problems += check(v, schema.get("items", {}), root, f"{where}[{i}]")
    return problems


def validate(doc: dict) -> None:
    schema = doc_schema()
    assert check(doc, schema, schema) == []
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")


def test_run_json_is_valid_and_holds_the_numbers(capsys, tmp_path):
    path = tmp_path / "run.json"
    r = main_in_process(capsys, "run", str(DATA / "tiny.py"), "-s", "contract", "--bandwidth", "x=300GB/s",
                        "--latency", "x=1us", "--json", str(path))
    assert r.code == 0, r.err
    doc = json.loads(path.read_text())
    validate(doc)
    assert (doc["command"], doc["program"], doc["mesh"], doc["backend"], doc["verified"], doc["cheapest"]) == (
        "run", "tiny", {"x": 2, "y": 2}, "local", True, "contract")
    assert doc["topology"] == {"links": {"x": {"bandwidth": 300e9, "latency": 1e-6}},
                               "default": {"bandwidth": 25e9, "latency": 5e-6}}
    (s,) = doc["strategies"]
    # one all-reduce of the [8, 4] float32 partial sums over x: 64 B each way per device, 2 messages
    assert (s["total_bytes"], s["min_bytes"], s["bytes_per_axis"], s["messages"], s["collectives"]) == (
        512, 512, {"x": 512}, 8, 1)
    assert s["estimated_time_s"] == pytest.approx(2 * 1e-6 + 128 / 300e9)
    assert s["peak_memory_bytes"] == [320] * 4 and s["max_peak_memory_bytes"] == 320
    assert (s["bitwise"], s["max_ulp"], s["first_divergence"], s["error"]) == (True, None, None, None)


def test_compare_json_of_every_library_strategy_is_valid(capsys, tmp_path):
    path = tmp_path / "mlp.json"
    r = main_in_process(capsys, "compare", "mlp", "--json", str(path))
    assert r.code == 0, r.err
    doc = json.loads(path.read_text())
    validate(doc)
    assert [s["name"] for s in doc["strategies"]][:2] == ["dp", "megatron"] and doc["verified"] is True


def test_compare_json_with_a_failure_an_error_and_a_reassociation_is_valid(capsys, tmp_path):
    path = tmp_path / "cmp.json"
    r = main_in_process(capsys, "compare", str(DATA / "drift.py"), "--json", str(path))
    assert r.code == 1
    doc = json.loads(path.read_text())
    validate(doc)
    assert doc["verified"] is False and doc["cheapest"] is None
    assert doc["strategies"][0]["first_divergence"].startswith("output 0: 14 of 16 elements differ")

    r = main_in_process(capsys, "compare", str(DATA / "tiny.py"), "--device-memory", "300", "--json", str(path))
    assert r.code == 3
    doc = json.loads(path.read_text())
    validate(doc)
    assert doc["strategies"][1]["error"] is not None and doc["strategies"][1]["total_bytes"] is None

    r = main_in_process(capsys, "compare", str(DATA / "floats.py"), "--json", str(path))
    doc = json.loads(path.read_text())
    validate(doc)
    s = doc["strategies"][0]
    assert (s["verified"], s["bitwise"], s["max_ulp"], doc["exact"]) == (True, False, 11, False)


def test_the_checker_catches_what_the_schema_forbids(capsys, tmp_path):
    path = tmp_path / "cmp.json"
    main_in_process(capsys, "compare", str(DATA / "tiny.py"), "--json", str(path))
    doc = json.loads(path.read_text())
    schema = doc_schema()
    assert check(doc, schema, schema) == []
    broken = json.loads(path.read_text())
    del broken["strategies"][0]["total_bytes"]
    broken["strategies"][1]["verified"] = "yes"
    broken["backend"] = "gpu"
    broken["extra"] = 1
    assert sorted(check(broken, schema, schema)) == [
        "$.backend: 'gpu' not in ['local', 'ray', 'none']", "$.strategies[0]: missing 'total_bytes'",
        "$.strategies[1].verified: 'yes' is not of type boolean", "$: unexpected property 'extra'",
    ]


def test_every_field_is_described_on_the_page_and_written_by_the_code():
    from simshard.cli.summary import SCHEMA_VERSION, StrategySummary

    schema = doc_schema()
    page = (DATA.parent.parent.parent / "docs" / "json-schema.md").read_text().split("## Fields", 1)[1]
    described = {line.split("`")[1] for line in page.splitlines() if line.startswith("| `")}
    strategy = schema["$defs"]["strategy"]
    assert set(schema["properties"]) | set(strategy["properties"]) == described
    assert set(strategy["properties"]) == set(strategy["required"]) == set(StrategySummary.__dataclass_fields__)
    assert schema["properties"]["schema_version"]["const"] == SCHEMA_VERSION


def test_compare_conv_ranks_the_resnet50_strategies_by_ckks_rotations(capsys, tmp_path):
    """The FHE seed's ranking: {2,8,1} (784 rotations) before {1,4,1} (4096), though it sends more bytes."""
    path = tmp_path / "conv.json"
    r = main_in_process(capsys, "compare", "conv", "--strategies", "resnet50_y4,resnet50_x2y8", "--backend", "local",
                        "--json", str(path))
    assert r.code == 0, r.err
    doc = json.loads(path.read_text())
    validate(doc)
    y4, x2y8 = doc["strategies"]
    assert doc["cheapest"] == "resnet50_x2y8" and x2y8["total_bytes"] > y4["total_bytes"]
    assert (x2y8["program_cost"]["rank"], y4["program_cost"]["rank"]) == (1, 2)
    assert (x2y8["program_cost"]["values"]["rotations"], y4["program_cost"]["values"]["rotations"]) == (784, 4096)
    assert "CKKS" in r.out and "1/2" in r.out and "4096" in r.out
