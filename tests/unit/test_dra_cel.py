"""DRA's CEL selectors run by a real CEL interpreter: what they match, how they fail, the cache."""

from __future__ import annotations

import subprocess
import sys
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.core.devices.dracel import (
    SelectorCache,
    compile_selector,
    first_available,
    matching,
    select,
)
from queue_controller.core.model.dra import Device, DeviceClass, DeviceRequest, Version, qualify
from queue_controller.core.model.kubecel import Semver
from queue_controller.core.model.quantity import parse_milli
from queue_controller.errors import InvalidSpecError

NV = "gpu.nvidia.com"
GPU_CLASS = DeviceClass(
    "gpu.nvidia.com",
    (f'device.driver == "{NV}" && device.attributes["{NV}"].type == "gpu"',),
)


def gpu(
    name: str = "gpu-0",
    *,
    product: str = "NVIDIA H100 80GB HBM3",
    architecture: str = "Hopper",
    kind: str = "gpu",
    memory: str = "80Gi",
    driver_version: str = "550.54.15",
    index: int = 0,
    driver: str = NV,
) -> Device:
    return Device.from_slice(
        driver,
        name,
        {
            "type": {"string": kind},
            "productName": {"string": product},
            "architecture": {"string": architecture},
            "driverVersion": {"version": driver_version},
            "index": {"int": index},
        },
        {"memory": {"value": memory}},
    )


def request(*selectors: str, count: int = 1, device_class: str = "gpu.nvidia.com") -> DeviceRequest:
    return DeviceRequest("gpus", device_class, count, selectors=selectors)


def names(devices: list[Device]) -> list[str]:
    return [d.name for d in devices]


H100 = gpu("h100", product="NVIDIA H100 80GB HBM3", memory="80Gi")
A100_40 = gpu("a100-40", product="NVIDIA A100-SXM4-40GB", architecture="Ampere", memory="40Gi")
L4 = gpu(
    "l4",
    product="NVIDIA L4",
    architecture="Ada Lovelace",
    memory="24Gi",
    driver_version="535.104.5",
)
MIG = gpu("mig", kind="mig", memory="10Gi")
OTHER_DRIVER = gpu("other", driver="gpu.example.com")
FLEET = [H100, A100_40, L4, MIG, OTHER_DRIVER]


def test_a_name_without_a_domain_belongs_to_the_driver() -> None:
    assert qualify(NV, "productName") == (NV, "productName")
    assert qualify(NV, "example.com/rack") == ("example.com", "rack")
    device = Device.from_slice(NV, "d", {"example.com/rack": {"string": "r1"}}, {})
    assert device.attributes == {"example.com": {"rack": "r1"}}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (f'device.attributes["{NV}"].productName == "NVIDIA L4"', ["l4"]),
        (f'device.attributes["{NV}"].productName.startsWith("NVIDIA A100")', ["a100-40"]),
        (f'device.attributes["{NV}"].architecture in ["Hopper", "Ampere"]', ["h100", "a100-40"]),
        (f'device.attributes["{NV}"].index == 0', ["h100", "a100-40", "l4"]),
        # The class's selector already keeps the MIG device out.
        (f'device.attributes["{NV}"].type == "mig"', []),
    ],
)
def test_selectors_on_attributes(selector: str, expected: list[str]) -> None:
    assert names(matching(FLEET, GPU_CLASS, request(selector), SelectorCache())) == expected


def test_the_class_selector_checks_the_driver_and_type() -> None:
    assert names(matching(FLEET, GPU_CLASS, request(), SelectorCache())) == [
        "h100",
        "a100-40",
        "l4",
    ]
    mig_class = DeviceClass("mig", (f'device.attributes["{NV}"].type == "mig"',))
    assert names(matching(FLEET, mig_class, request(device_class="mig"), SelectorCache())) == [
        "mig"
    ]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (f'device.capacity["{NV}"].memory.compareTo(quantity("40Gi")) >= 0', ["h100", "a100-40"]),
        (f'device.capacity["{NV}"].memory.compareTo(quantity("40Gi")) > 0', ["h100"]),
        # 40Gi written another way is the same amount.
        (f'device.capacity["{NV}"].memory == quantity("40960Mi")', ["a100-40"]),
        (f'device.capacity["{NV}"].memory.isLessThan(quantity("32G"))', ["l4"]),
        (f'device.capacity["{NV}"].memory.isGreaterThan(quantity("79Gi"))', ["h100"]),
        (f'device.capacity["{NV}"].memory.asInteger() == {24 * 2**30}', ["l4"]),
        (f'device.capacity["{NV}"].memory.asApproximateFloat() > 5e10', ["h100"]),
    ],
)
def test_memory_capacity_as_a_quantity(selector: str, expected: list[str]) -> None:
    assert names(matching(FLEET, GPU_CLASS, request(selector), SelectorCache())) == expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (
            f'device.attributes["{NV}"].driverVersion.compareTo(semver("550.0.0")) >= 0',
            ["h100", "a100-40"],
        ),
        (f'device.attributes["{NV}"].driverVersion.isLessThan(semver("550.0.0"))', ["l4"]),
        (f'device.attributes["{NV}"].driverVersion.major() == 535', ["l4"]),
        # Build metadata does not count, as in semver.org and Kubernetes.
        (f'device.attributes["{NV}"].driverVersion == semver("550.54.15")', ["h100", "a100-40"]),
    ],
)
def test_version_attributes_are_semvers(selector: str, expected: list[str]) -> None:
    fleet = [H100, gpu("a100-40", driver_version="550.54.15+build.7"), L4]
    assert names(matching(fleet, GPU_CLASS, request(selector), SelectorCache())) == expected


def test_semver_precedence_follows_semver_org() -> None:
    order = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta.2", "1.0.0-beta.11"]
    order += ["1.0.0-rc.1", "1.0.0", "1.0.1", "1.10.0", "2.0.0"]
    parsed = [Semver.parse(v) for v in order]
    assert all(a < b for a, b in pairwise(parsed))
    assert not any(b < a or a == b for a, b in pairwise(parsed))
    assert Semver.parse("1.0.0+a") == Semver.parse("1.0.0+b")
    for bad in ["1.0", "01.0.0", "1.0.0-", "v1.0.0", "550.54"]:
        with pytest.raises(ValueError, match="not a semantic version"):
            Semver.parse(bad)


def test_a_version_attribute_must_be_a_semver() -> None:
    with pytest.raises(InvalidSpecError, match=r"attributes\[driverVersion\].*not a semantic"):
        gpu(driver_version="550.54")


def test_the_driver_and_other_drivers() -> None:
    any_class = DeviceClass("any")
    selector = 'device.driver == "gpu.example.com"'
    found = matching(FLEET, any_class, request(selector, device_class="any"), SelectorCache())
    assert names(found) == ["other"]


def test_a_missing_attribute_matches_nothing_and_the_error_is_kept() -> None:
    selector = f'device.attributes["{NV}"].cudaComputeCapability == "9.0"'
    result = select(FLEET, GPU_CLASS, request(selector), SelectorCache())
    assert result.devices == ()
    assert [e.device.name for e in result.errors] == ["h100", "a100-40", "l4"]
    assert "cudaComputeCapability" in result.errors[0].error


def test_an_unknown_domain_is_an_empty_map() -> None:
    cache = SelectorCache()
    assert matching(FLEET, GPU_CLASS, request('"example.com" in device.attributes'), cache) == []
    has = f'!has(device.attributes["{NV}"].rack) && !has(device.attributes["example.com"].rack)'
    assert names(matching(FLEET, GPU_CLASS, request(has), cache)) == ["h100", "a100-40", "l4"]
    found = select(FLEET, GPU_CLASS, request('device.attributes["example.com"].rack == "r"'), cache)
    assert found.devices == ()
    assert len(found.errors) == 3


def test_runtime_errors_in_the_kubernetes_libraries_match_nothing() -> None:
    cache = SelectorCache()
    for selector in [
        'semver("550") == semver("550.0.0")',
        'quantity("ten") == quantity("10")',
        f'device.capacity["{NV}"].memory.compareTo(semver("1.0.0")) > 0',
        'quantity("1500m").asInteger() == 1',
    ]:
        result = select([H100], GPU_CLASS, request(selector), cache)
        assert result.devices == ()
        assert result.errors, selector
    bad_semver = select([H100], GPU_CLASS, request('semver("550") == semver("1.0.0")'), cache)
    assert "not a semantic version" in bad_semver.errors[0].error


def test_a_selector_that_does_not_parse_is_an_invalid_spec_naming_it() -> None:
    with pytest.raises(InvalidSpecError, match=r"selector 'device.driver == ' does not parse") as e:
        compile_selector("device.driver == ")
    assert "column" in str(e.value)
    # Reported even when there is no device to run it on.
    with pytest.raises(InvalidSpecError, match="does not parse"):
        matching([], GPU_CLASS, request('device.attributes["x"].'), SelectorCache())


def test_a_selector_reading_an_undeclared_name_is_an_invalid_spec() -> None:
    with pytest.raises(InvalidSpecError, match=r"reads 'devce', which is not declared"):
        compile_selector('devce.driver == "gpu.nvidia.com"')
    with pytest.raises(InvalidSpecError, match=r"reads 'y'"):
        compile_selector(f'device.attributes["{NV}"].index.exists(x, x == y)')
    # Names bound by a macro, and type names, are declared.
    list_macro = "[1, 2].all(i, i > 0) && [3].exists_one(j, j == 3)"
    assert compile_selector(list_macro).evaluate(H100).matches
    assert compile_selector("type(device.driver) == string").evaluate(H100).matches


def test_a_selector_that_is_not_a_bool_is_an_invalid_spec() -> None:
    with pytest.raises(
        InvalidSpecError, match=r"'device.driver' must evaluate to bool, not string"
    ):
        matching([H100], GPU_CLASS, request("device.driver"), SelectorCache())
    memory = f'device.capacity["{NV}"].memory'
    with pytest.raises(InvalidSpecError, match="must evaluate to bool, not quantity"):
        matching([H100], GPU_CLASS, request(memory), SelectorCache())


def test_identical_devices_on_many_nodes_compile_once_and_evaluate_once() -> None:
    # 1,000 nodes of 8 identical GPUs; only the device names differ.
    fleet = [gpu(f"node-{n}-gpu-{i}") for n in range(1000) for i in range(8)]
    cache = SelectorCache()
    selector = f'device.capacity["{NV}"].memory.compareTo(quantity("40Gi")) >= 0'
    assert len(matching(fleet, GPU_CLASS, request(selector), cache)) == 8000
    assert cache.compilations == 2  # the class's selector and the request's
    assert cache.evaluations == 2  # one kind of device, two selectors
    # Another kind of device is another evaluation; asking again costs nothing.
    assert len(matching([*fleet, L4], GPU_CLASS, request(selector), cache)) == 8000
    assert (cache.compilations, cache.evaluations) == (2, 4)


def test_devices_that_differ_in_what_a_selector_reads_are_not_confused() -> None:
    one = Device(NV, "a", {NV: {"flag": True}})
    other = Device(NV, "b", {NV: {"flag": 1}})
    assert one.equivalence_key != other.equivalence_key
    cache = SelectorCache()
    any_class = DeviceClass("any")
    found = matching(
        [one, other],
        any_class,
        request(f'device.attributes["{NV}"].flag == true', device_class="any"),
        cache,
    )
    assert names(found) == ["a"]


def test_first_available_takes_the_first_alternative_that_fits() -> None:
    classes = {GPU_CLASS.name: GPU_CLASS}
    h100s = DeviceRequest(
        "h100",
        GPU_CLASS.name,
        2,
        selectors=(f'device.attributes["{NV}"].architecture == "Hopper"',),
    )
    big = DeviceRequest(
        "big",
        GPU_CLASS.name,
        2,
        selectors=(f'device.capacity["{NV}"].memory.compareTo(quantity("40Gi")) >= 0',),
    )
    either = DeviceRequest("gpus", alternatives=(h100s, big))
    chosen = first_available(FLEET, classes, either, SelectorCache())
    assert chosen is not None
    assert chosen[0].name == "big"
    assert names(chosen[1]) == ["h100", "a100-40"]
    assert first_available([H100], classes, either, SelectorCache()) is None
    missing = DeviceRequest("x", alternatives=(DeviceRequest("y", "no-such-class"),))
    with pytest.raises(InvalidSpecError, match="no-such-class"):
        first_available(FLEET, classes, missing, SelectorCache())


_SELECTORS = [
    f'device.attributes["{NV}"].productName.startsWith("NVIDIA H")',
    f'device.capacity["{NV}"].memory.compareTo(quantity("40Gi")) >= 0',
    f'device.attributes["{NV}"].driverVersion.compareTo(semver("550.0.0")) >= 0',
    f'device.attributes["{NV}"].index > 3 && device.attributes["{NV}"].healthy',
    f'has(device.attributes["{NV}"].healthy) || device.attributes["{NV}"].index == 0',
]

_devices = st.builds(
    lambda product, memory_mi, version, index, healthy: Device(
        NV,
        "d",
        {
            NV: {
                "productName": product,
                "driverVersion": Version(f"{version[0]}.{version[1]}.{version[2]}"),
                "index": index,
                **({"healthy": healthy} if healthy is not None else {}),
            }
        },
        {NV: {"memory": parse_milli(f"{memory_mi}Mi")}},
    ),
    st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA L4", "NVIDIA A100"]),
    st.integers(0, 200_000),
    st.tuples(st.integers(0, 600), st.integers(0, 99), st.integers(0, 99)),
    st.integers(-1, 8),
    st.none() | st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(devices=st.lists(_devices, min_size=1, max_size=6), selector=st.sampled_from(_SELECTORS))
def test_a_cached_verdict_equals_a_fresh_evaluation(devices: list[Device], selector: str) -> None:
    cache = SelectorCache()
    fresh = compile_selector(selector)
    # Each device twice, so the second asks come from the cache.
    for device in [*devices, *devices]:
        assert cache.verdict(selector, device) == fresh.evaluate(device)
    assert cache.evaluations == len({d.equivalence_key for d in devices})


def test_a_selector_that_is_one_literal_is_refused_when_compiled() -> None:
    for expression, kind in (
        ("1", "int"),
        ("'x'", "string"),
        ("[true]", "list"),
        ("(2.5)", "double"),
    ):
        with pytest.raises(InvalidSpecError, match=f"must evaluate to bool, not {kind}"):
            compile_selector(expression)
    assert compile_selector("true").evaluate(H100).matches


def test_an_integer_literal_out_of_range_is_refused_without_printing_it() -> None:
    # cel-go refuses these at parse time; Python cannot even print 5,000 digits.
    for expression in (
        "9" * 5000 + " > 0",
        "9223372036854775808 > 0",
        "18446744073709551616u > 0u",
    ):
        with pytest.raises(InvalidSpecError, match="is out of range"):
            compile_selector(expression)
    assert compile_selector("9223372036854775807 > 0").evaluate(H100).matches
    assert compile_selector("18446744073709551615u > 0u").evaluate(H100).matches


def test_building_the_interpreter_leaves_the_recursion_limit_as_it_was() -> None:
    # cel-python raises it to 2500 for the whole process, a setting no library of
    # the controller's should change behind its back (hypothesis warns of it too).
    probe = (
        "import sys; before = sys.getrecursionlimit(); "
        "from queue_controller.core.devices.dracel import compile_selector; "
        "compile_selector('true'); "
        "assert sys.getrecursionlimit() == before, sys.getrecursionlimit()"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


def _nested_all(levels: int) -> str:
    expression = "true"
    for level in range(levels):
        expression = f"[0, 1, 2, 3, 4, 5, 6, 7, 8, 9].all(v{level}, {expression})"
    return expression


def test_a_selector_past_the_step_budget_is_refused_and_the_refusal_is_kept() -> None:
    cache = SelectorCache()
    # 10**2 turns are within the budget; 10**6 would take minutes unbounded.
    assert cache.verdict(_nested_all(2), H100).matches
    for _ in range(2):
        with pytest.raises(InvalidSpecError, match=r"costs too much to run: it runs past 20,000"):
            cache.verdict(_nested_all(6), H100)
    assert cache.evaluations == 2  # the refusal was kept: not run again


def test_a_selector_building_a_huge_value_is_refused() -> None:
    # Each level doubles the string: 2**30 copies of it, unbounded.
    levels = 30
    body = f"size(v{levels}) > 0"
    for level in reversed(range(levels)):
        body = f"[v{level} + v{level}].all(v{level + 1}, {body})"
    expression = f'["{"a" * 100}"].all(v0, {body})'
    with pytest.raises(InvalidSpecError, match="builds a value of more than 65,536 items"):
        compile_selector(expression).evaluate(H100)
