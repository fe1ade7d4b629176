"""Bounded parsing of what a tenant writes: counts in annotations, integers and floats
in fields, gangs of nobody.  Each bad value makes its own gang InvalidSpec, naming the
field, and never raises out of a cycle's translation (issue 22, "bounded parsing")."""

from __future__ import annotations

import copy
import time
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_controller.core.devices.dracel import compile_selector
from queue_controller.core.model.quantity import MAX_QUANTITY_CHARS, parse_quantity
from queue_controller.errors import InputError, InvalidSpecError, QuantityError
from queue_controller.kube import fields
from queue_controller.kube.fields import INT64_MAX, INT64_MIN, MAX_GANG_MEMBERS, whole_number
from tests.unit.test_kind_plainpods import pod, views

MIN_MEMBER = "queue-controller.io/min-member"
TIMEOUT = "queue-controller.io/pods-ready-timeout-seconds"
TOTAL = "queue-controller.io/pod-group-total-count"
KUEUE_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
# Digits str.isdigit() accepts: int() reads these two as 1 and 3, and refuses "²".
ARABIC_ONE, ARABIC_THREE = "\u0661", "\u0663"


def job(
    name: str = "train", *, parallelism: Any = 2, annotations: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "3",
            "creationTimestamp": "2026-11-30T09:00:00Z",
            "labels": {"queue-controller.io/queue": "q"},
            "annotations": annotations or {},
        },
        "spec": {
            "parallelism": parallelism,
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "m", "image": "w", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                    ],
                }
            },
        },
    }


def workload_of(*objects: dict[str, Any], name: str = "train") -> Any:
    """The one gang named ``name``, read as a cycle reads it (a skipped object fails)."""
    (gang,) = [g for g in views(*objects).gangs if g.gang.name == name]
    return gang.workload


# -- the shared whole-number reader -----------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "²",
        "1²",
        ARABIC_ONE + ARABIC_ONE,
        ARABIC_THREE,
        "+3",
        "-3",
        " 3",
        "3 ",
        "3.0",
        "",
        "0x10",
        "1_000",
        "三",
    ],
)
def test_whole_number_is_ascii_digits_only(raw: str) -> None:
    with pytest.raises(InputError) as caught:
        whole_number(raw, field="metadata.annotations[x]")
    assert caught.value.field == "metadata.annotations[x]"


def test_whole_number_bounds() -> None:
    assert whole_number("0007", field="f") == 7
    assert whole_number(str(INT64_MAX), field="f") == INT64_MAX
    with pytest.raises(InputError, match="too large"):
        whole_number(str(INT64_MAX + 1), field="f")
    with pytest.raises(InputError, match="too large"):
        whole_number("4", field="f", maximum=3)


def test_thousands_of_digits_are_refused_at_once() -> None:
    # Python's int() refuses over 4,300 digits with a ValueError: never reached.
    raw = "9" * 1_000_000
    started = time.perf_counter()
    with pytest.raises(InputError, match="too large"):
        whole_number(raw, field="f")
    assert time.perf_counter() - started < 0.5


@given(st.text(max_size=30))
def test_whole_number_raises_only_input_errors(raw: str) -> None:
    try:
        value = whole_number(raw, field="f")
    except InputError:
        return
    assert raw.isascii()
    assert raw.isdigit()
    assert value == int(raw) <= INT64_MAX


# -- integers and floats read from objects ----------------------------------------------


@pytest.mark.parametrize(
    "value", [INT64_MAX + 1, INT64_MIN - 1, 10**5000], ids=["max+1", "min-1", "5000-digits"]
)
def test_an_int_field_beyond_int64_is_an_input_error(value: int) -> None:
    with pytest.raises(InputError) as caught:
        fields.get({"spec": {"n": value}}, "spec.n", int, 0)
    assert caught.value.field == "spec.n"
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_float_field_is_finite(value: float) -> None:
    with pytest.raises(InputError, match="finite"):
        fields.get({"spec": {"x": value}}, "spec.x", float, 0.0)


def test_int64_itself_is_read() -> None:
    assert fields.get({"n": INT64_MAX}, "n", int, 0) == INT64_MAX
    assert fields.get({"n": INT64_MIN}, "n", float, 0.0) == float(INT64_MIN)


# -- a Job's annotations -----------------------------------------------------------------


@pytest.mark.parametrize("annotation", [MIN_MEMBER, TIMEOUT])
@pytest.mark.parametrize(
    "raw",
    ["²", ARABIC_ONE, "9" * 5000, "-1", str(INT64_MAX + 1)],
    ids=["sup", "arabic", "5000", "neg", "max+1"],
)
def test_a_bad_job_annotation_is_invalid_spec_naming_it(annotation: str, raw: str) -> None:
    workload = workload_of(job(annotations={annotation: raw}))
    assert f"metadata.annotations[{annotation}]" in workload.spec_error


def test_a_bad_job_is_invalid_on_its_own() -> None:
    good = job("good")
    bad = job("bad", annotations={MIN_MEMBER: "²"})
    gangs = {g.gang.name: g.workload for g in views(bad, good).gangs}
    assert gangs["good"].spec_error == ""
    assert MIN_MEMBER in gangs["bad"].spec_error


def test_min_member_zero_is_a_gang_of_nobody() -> None:
    workload = workload_of(job(annotations={MIN_MEMBER: "0"}))
    assert f"metadata.annotations[{MIN_MEMBER}]" in workload.spec_error
    assert "nobody" in workload.spec_error


def test_min_member_above_the_pods_is_invalid_naming_the_annotation() -> None:
    workload = workload_of(job(parallelism=2, annotations={MIN_MEMBER: "3"}))
    assert f"metadata.annotations[{MIN_MEMBER}]" in workload.spec_error


def test_min_member_within_the_pods_is_read() -> None:
    workload = workload_of(job(parallelism=4, annotations={MIN_MEMBER: "3", TIMEOUT: "60"}))
    assert workload.spec_error == ""
    assert [(s.count, s.min_count) for s in workload.pod_sets] == [(4, 3)]


@pytest.mark.parametrize("parallelism", [0, MAX_GANG_MEMBERS + 1, 2**31 - 1])
def test_a_job_of_no_pods_or_more_than_a_cluster_holds_is_invalid(parallelism: int) -> None:
    workload = workload_of(job(parallelism=parallelism))
    assert "spec.parallelism" in workload.spec_error


def test_a_job_field_that_cannot_be_read_is_invalid_spec_not_skipped() -> None:
    bad = job()
    bad["spec"]["parallelism"] = "two"
    workload = workload_of(bad)
    assert "spec.parallelism" in workload.spec_error
    huge = job()
    huge["spec"]["completions"] = 10**40
    assert "spec.completions" in workload_of(huge).spec_error


def test_a_job_with_a_bad_template_field_names_it() -> None:
    bad = job()
    bad["spec"]["template"]["spec"]["containers"] = "not a list"
    assert "spec.template.spec.containers" in workload_of(bad).spec_error


# -- plain pods' annotations -------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    ["²", ARABIC_ONE, "9" * 5000, str(INT64_MAX + 1), "0"],
    ids=["sup", "arabic", "5000", "max+1", "0"],
)
def test_a_bad_total_count_is_invalid_naming_it(raw: str) -> None:
    workload = workload_of(pod("ring-0", total=raw), pod("ring-1", total=raw), name="ring")
    assert f"metadata.annotations[{TOTAL}]" in workload.spec_error


def test_a_bad_kueue_total_count_is_invalid_naming_it() -> None:
    members = [pod(f"ring-{i}", total=None, kueue=True) for i in range(2)]
    for member in members:
        member["metadata"]["annotations"][KUEUE_TOTAL] = "²"
    workload = workload_of(*members, name="ring")
    assert f"metadata.annotations[{KUEUE_TOTAL}]" in workload.spec_error


def test_a_total_count_above_a_cluster_is_invalid() -> None:
    raw = str(MAX_GANG_MEMBERS + 1)
    workload = workload_of(pod("ring-0", total=raw), name="ring")
    assert "too large" in workload.spec_error


def test_a_bad_pod_timeout_is_invalid_naming_it() -> None:
    members = [pod(f"ring-{i}") for i in range(2)]
    for member in members:
        member["metadata"]["annotations"][TIMEOUT] = "²"
    workload = workload_of(*members, name="ring")
    assert f"metadata.annotations[{TIMEOUT}]" in workload.spec_error


def test_objects_are_not_changed_by_reading() -> None:
    original = job(annotations={MIN_MEMBER: "²"})
    kept = copy.deepcopy(original)
    workload_of(original)
    assert original == kept


# -- quantities --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "1e999999999",
        "1E999999999",
        "9e9223372036854775807",
        "9" * 20,
        "9223372036854775808",
        "-9223372036854775809",
        "8Ei",
        "10E",
        "1e9223372036854775808",  # the exponent is no int64: apimachinery's ErrSuffix
        "1e" + "9" * 90,
        "1" * (MAX_QUANTITY_CHARS + 1),
        "9" * 5000,
    ],
    ids=lambda text: text[:24],
)
def test_a_quantity_out_of_range_is_refused_at_once(text: str) -> None:
    started = time.perf_counter()
    with pytest.raises(QuantityError) as caught:
        parse_quantity(text)
    assert time.perf_counter() - started < 0.1
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1e-999999999", Fraction(1, 10**9)),  # rounded up to 1n, as apimachinery does
        ("-1e-20", Fraction(-1, 10**9)),
        ("0.9999999999", Fraction(1)),
        ("0e999999999999", Fraction(0)),
        ("9223372036854775807", Fraction(INT64_MAX)),
        ("7Ei", Fraction(7 * 2**60)),
        ("9.2E", Fraction(92 * 10**17)),
        ("0." + "0" * 90 + "1Ei", Fraction(1, 10**9)),
        ("0.000000000001Ei", Fraction(1152921504606847, 10**9)),  # 1152921.504606846976
        (INT64_MAX, Fraction(INT64_MAX)),
    ],
)
def test_quantities_within_range_stay_exact(value: str | int, expected: Fraction) -> None:
    assert parse_quantity(value) == expected


@pytest.mark.parametrize(
    "value", [INT64_MAX + 1, 10**5000, 1e19, -1e300], ids=["max+1", "5000", "1e19", "-1e300"]
)
def test_a_number_given_as_a_quantity_is_within_int64(value: float) -> None:
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity(value)


@given(st.text(alphabet="0123456789.+-eEKMGTPinumk", max_size=40))
def test_any_quantity_text_parses_or_is_a_quantity_error_quickly(text: str) -> None:
    started = time.perf_counter()
    try:
        amount = parse_quantity(text)
    except QuantityError:
        return
    finally:
        assert time.perf_counter() - started < 0.1
    assert abs(amount) <= INT64_MAX
    assert (amount * 10**9).denominator == 1  # on apimachinery's nano grid


# -- CEL selectors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    ["(" * 5000 + "true" + ")" * 5000, "!" * 3000 + "true", "[" * 100 + "]" * 100 + " == []"],
    ids=["parens", "nots", "lists"],
)
def test_a_deeply_nested_selector_is_invalid_spec_at_once(expression: str) -> None:
    started = time.perf_counter()
    with pytest.raises(InvalidSpecError, match="nests"):
        compile_selector(expression)
    assert time.perf_counter() - started < 0.5


def test_a_selector_over_the_api_limit_is_invalid_spec() -> None:
    with pytest.raises(InvalidSpecError, match="limit"):
        compile_selector("true || " * 2000 + "true")


def test_nesting_inside_a_string_literal_is_not_counted() -> None:
    compile_selector('device.driver == "' + "(" * 100 + '"')


def test_a_pod_group_of_min_member_zero_is_invalid_spec() -> None:
    from tests.unit.test_kind_plainpods import group

    members = [pod(f"ring-{i}") for i in range(2)]
    workload = workload_of(*members, group("Pending", min_member=0), name="ring")
    assert "spec.minMember" in workload.spec_error
