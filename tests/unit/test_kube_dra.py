"""DRA objects (resource.k8s.io/v1) read into the core's types (kube/dra.py), pods' claims
(kube/objects.py), and the four kinds in a translated snapshot (kube/snapshot.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_controller.controller.handlers import feed
from queue_controller.controller.state import ClusterState, slim_pod
from queue_controller.core.model.dra import (
    AllocatedDevice,
    ClaimTemplate,
    Device,
    DeviceClass,
    DeviceRequest,
    ResourceClaim,
    ResourceSlice,
)
from queue_controller.core.model.objects import PodClaim
from queue_controller.errors import InputError
from queue_controller.kube import dra, kinds, objects, resources
from queue_controller.kube.snapshot import SUPPORTED_KINDS, Located, translate
from queue_controller.kube.views import member_pod
from queue_controller.localcluster import devices
from queue_controller.nodepools import Pool

API = "resource.k8s.io/v1"
H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'


def template_body(requests: list[dict[str, Any]], name: str = "h100-x4") -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }


def claim_body(
    requests: list[dict[str, Any]], status: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": "train-0-gpus-x7k2p", "namespace": "ml"},
        "spec": {"devices": {"requests": requests}},
    }
    if status is not None:
        body["status"] = status
    return body


def exactly(count: int = 4, *selectors: str, **extra: Any) -> dict[str, Any]:
    return {
        "deviceClassName": "gpu.nvidia.com",
        "count": count,
        "selectors": [{"cel": {"expression": s}} for s in selectors],
        **extra,
    }


def h100_slice(node: str = "h100-0000") -> dict[str, Any]:
    pool = Pool.model_validate(
        {
            "name": "h100",
            "count": 1,
            "gpu": {
                "product": "NVIDIA-H100-80GB-HBM3",
                "count": 8,
                "memoryMiB": 81920,
                "family": "hopper",
            },
        }
    )
    made = devices.resource_slice(pool, 0)
    assert made is not None
    made["metadata"]["name"] = f"{node}-gpu.nvidia.com"
    made["spec"]["nodeName"] = node
    made["spec"]["pool"]["name"] = node
    return made


def raises(call: Any, *, where: str, field: str, words: str = "") -> InputError:
    with pytest.raises(InputError) as caught:
        call()
    error = caught.value
    assert error.where == where, error
    assert error.field == field, error
    assert words in error.detail, error
    return error


# -- the four resources are watched, granted and read by plan -----------------------


def test_the_four_dra_resources_are_watched_granted_and_planned() -> None:
    dra_kinds = (
        resources.DEVICE_CLASS,
        resources.RESOURCE_SLICE,
        resources.RESOURCE_CLAIM,
        resources.RESOURCE_CLAIM_TEMPLATE,
    )
    assert [(r.plural, r.namespaced) for r in dra_kinds] == [
        ("deviceclasses", False),
        ("resourceslices", False),
        ("resourceclaims", True),
        ("resourceclaimtemplates", True),
    ]
    for resource in dra_kinds:
        assert resource in kinds.WATCHED
        assert (API, resource.kind) in SUPPORTED_KINDS
        assert resource.group == "resource.k8s.io"
    granted = {
        plural
        for rule in kinds.rbac_rules()
        if rule.group == "resource.k8s.io"
        for plural in rule.resources
        if set(rule.verbs) >= {"get", "list", "watch"}
    }
    assert granted == {r.plural for r in dra_kinds}
    assert resources.RESOURCE_SLICE.path(name="s") == "/apis/resource.k8s.io/v1/resourceslices/s"
    assert (
        resources.RESOURCE_CLAIM.path("ml", "c")
        == "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/c"
    )


# -- DeviceClass --------------------------------------------------------------------


def test_a_device_class_reads_its_selectors_and_quota_annotation() -> None:
    body = devices.device_class("gpu.nvidia.com", "gpu")
    assert dra.device_class(body) == DeviceClass(
        "gpu.nvidia.com",
        ('device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"',),
        "",
    )
    body["metadata"]["annotations"] = {dra.QUOTA_RESOURCE_ANNOTATION: "nvidia.com/gpu"}
    assert dra.device_class(body).quota_resource == "nvidia.com/gpu"
    bare = {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": "any"}}
    assert dra.device_class(bare) == DeviceClass("any")


def test_a_device_class_selector_without_an_expression_names_the_field() -> None:
    body = devices.device_class("gpu.nvidia.com", "gpu")
    body["spec"]["selectors"].append({"cel": {}})
    raises(
        lambda: dra.device_class(body),
        where="DeviceClass/gpu.nvidia.com",
        field="spec.selectors[1].cel.expression",
        words="required",
    )
    body["spec"]["selectors"][1] = {"cel": {"expression": 3}}
    raises(
        lambda: dra.device_class(body),
        where="DeviceClass/gpu.nvidia.com",
        field="spec.selectors[1].cel.expression",
        words="expected a string",
    )
    body["spec"]["selectors"][1] = "x"
    raises(
        lambda: dra.device_class(body),
        where="DeviceClass/gpu.nvidia.com",
        field="spec.selectors[1]",
    )


# -- ResourceSlice ------------------------------------------------------------------


def test_the_local_clusters_slice_reads_as_eight_h100s_on_its_node() -> None:
    got = dra.resource_slice(h100_slice("h100-0003"))
    assert (got.name, got.driver, got.pool, got.node) == (
        "h100-0003-gpu.nvidia.com",
        "gpu.nvidia.com",
        "h100-0003",
        "h100-0003",
    )
    assert [d.name for d in got.devices] == [f"gpu-{i}" for i in range(8)]
    gpu = got.devices[2]
    attributes = gpu.attributes["gpu.nvidia.com"]
    assert attributes["productName"] == "NVIDIA H100 80GB HBM3"
    assert attributes["index"] == 2
    assert attributes["type"] == "gpu"
    assert gpu.capacity["gpu.nvidia.com"]["memory"] == 80 * 1024**3 * 1000
    assert not gpu.allow_multiple_allocations
    # Alike but for their names: one equivalence class.
    assert len({d.equivalence_key for d in got.devices}) == 8  # uuid and index differ


def test_a_slice_not_bound_to_one_node_has_no_node() -> None:
    body = h100_slice()
    del body["spec"]["nodeName"]
    body["spec"]["allNodes"] = True
    body["spec"]["devices"][0]["allowMultipleAllocations"] = True
    got = dra.resource_slice(body)
    assert got.node == ""
    assert got.devices[0].allow_multiple_allocations


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (lambda s: s["spec"].pop("driver"), "spec.driver", "required"),
        (lambda s: s["spec"]["pool"].pop("name"), "spec.pool.name", "required"),
        (lambda s: s["spec"].update(nodeName=7), "spec.nodeName", "expected a string"),
        (lambda s: s["spec"]["devices"][3].pop("name"), "spec.devices[3].name", "required"),
        (
            lambda s: s["spec"]["devices"][3].update(name="gpu-0"),
            "spec.devices[3].name",
            "listed twice",
        ),
        (
            lambda s: s["spec"]["devices"][1]["attributes"].update(index={"int": "one"}),
            "spec.devices[1].attributes[index]",
            "not a int",
        ),
        (
            lambda s: s["spec"]["devices"][1]["attributes"].update(index={"int": 1, "bool": 1}),
            "spec.devices[1].attributes[index]",
            "exactly one of",
        ),
        (
            lambda s: s["spec"]["devices"][1]["attributes"].update(index="1"),
            "spec.devices[1].attributes[index]",
            "expected an object",
        ),
        (
            lambda s: s["spec"]["devices"][1]["attributes"].update(v={"version": "1.2"}),
            "spec.devices[1].attributes[v]",
            "",
        ),
        (
            lambda s: s["spec"]["devices"][4]["capacity"].update(memory={"value": "lots"}),
            "spec.devices[4].capacity[memory]",
            "",
        ),
        (
            lambda s: s["spec"]["devices"][4]["capacity"].update(memory={}),
            "spec.devices[4].capacity[memory]",
            "needs a value",
        ),
        (
            lambda s: s["spec"]["devices"][4].update(allowMultipleAllocations="yes"),
            "spec.devices[4].allowMultipleAllocations",
            "expected bool",
        ),
        (lambda s: s["spec"].update(devices=[3]), "spec.devices[0]", "expected an object"),
        (lambda s: s["metadata"].pop("name"), "metadata.name", "needs a name"),
    ],
)
def test_a_bad_slice_names_the_field(edit: Any, field: str, words: str) -> None:
    body = h100_slice()
    edit(body)
    where = (
        f"ResourceSlice/{body['metadata']['name']}"
        if "name" in body["metadata"]
        else "ResourceSlice/<unnamed>"
    )
    raises(lambda: dra.resource_slice(body), where=where, field=field, words=words)


# -- requests of claims and templates -----------------------------------------------


def test_a_template_of_four_h100s_reads_as_one_exact_request() -> None:
    got = dra.claim_template(template_body([{"name": "gpus", "exactly": exactly(4, H100)}]))
    assert got == ClaimTemplate(
        "ml", "h100-x4", (DeviceRequest("gpus", "gpu.nvidia.com", 4, False, (H100,)),)
    )


def test_defaults_all_mode_and_first_available() -> None:
    requests: list[dict[str, Any]] = [
        {"name": "one", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
        {
            "name": "every",
            "exactly": {"deviceClassName": "mig.nvidia.com", "allocationMode": "All"},
        },
        {
            "name": "big-or-small",
            "firstAvailable": [
                {"name": "h100", "deviceClassName": "gpu.nvidia.com", "count": 2,
                 "selectors": [{"cel": {"expression": H100}}]},
                {"name": "mig", "deviceClassName": "mig.nvidia.com", "allocationMode": "All"},
            ],
        },
    ]  # fmt: skip
    body = template_body(requests)
    del body["metadata"]["namespace"]
    got = dra.claim_template(body)
    assert got.namespace == "default"
    assert got.requests == (
        DeviceRequest("one", "gpu.nvidia.com", 1),
        DeviceRequest("every", "mig.nvidia.com", 1, all_devices=True),
        DeviceRequest(
            "big-or-small",
            alternatives=(
                DeviceRequest("h100", "gpu.nvidia.com", 2, False, (H100,)),
                DeviceRequest("mig", "mig.nvidia.com", 1, True),
            ),
        ),
    )


def test_a_broken_selector_is_kept_as_text_for_the_core_to_judge() -> None:
    # Whether it parses is the core's question (core/devices/dracel.py): the gang is then
    # Invalid naming its template, instead of the template vanishing from the cycle.
    broken = 'device.attributes["gpu.nvidia.com"].productName =='
    got = dra.claim_template(template_body([{"name": "gpus", "exactly": exactly(4, broken)}]))
    assert got.requests[0].selectors == (broken,)


REQUEST_ERRORS = [
    ({"exactly": exactly()}, "devices.requests[0].name", "required"),
    ({"name": "gpus"}, "devices.requests[0]", "exactly one of exactly and firstAvailable"),
    (
        {"name": "gpus", "exactly": exactly(), "firstAvailable": [exactly(name="x")]},
        "devices.requests[0]",
        "exactly one of",
    ),
    (
        {"name": "gpus", "exactly": {"count": 2}},
        "devices.requests[0].exactly.deviceClassName",
        "required",
    ),
    (
        {"name": "gpus", "exactly": exactly(0)},
        "devices.requests[0].exactly.count",
        "at least 1",
    ),
    (
        {"name": "gpus", "exactly": exactly("4")},  # type: ignore[arg-type]
        "devices.requests[0].exactly.count",
        "expected an integer",
    ),
    (
        {"name": "gpus", "exactly": exactly(allocationMode="Some")},
        "devices.requests[0].exactly.allocationMode",
        "'Some' is not one of ExactCount, All",
    ),
    (
        {"name": "gpus", "exactly": exactly(2, allocationMode="All")},
        "devices.requests[0].exactly.count",
        "ExactCount only",
    ),
    (
        {"name": "gpus", "exactly": {**exactly(4, H100), "selectors": [
            {"cel": {"expression": H100}}, {"cel": {"expression": ""}}]}},
        "devices.requests[0].exactly.selectors[1].cel.expression",
        "required",
    ),
    (
        {"name": "gpus", "exactly": {**exactly(4), "selectors": [{"cel": "x"}]}},
        "devices.requests[0].exactly.selectors[0].cel.expression",
        "expected an object",
    ),
    (
        {"name": "gpus", "firstAvailable": [exactly(name="a"), exactly(0, name="b")]},
        "devices.requests[0].firstAvailable[1].count",
        "at least 1",
    ),
    (
        {"name": "gpus", "firstAvailable": [exactly(name="a"), exactly()]},
        "devices.requests[0].firstAvailable[1].name",
        "required",
    ),
    (
        {"name": "gpus", "firstAvailable": [exactly(name="a"), exactly(name="a")]},
        "devices.requests[0].firstAvailable[1].name",
        "named twice",
    ),
    (
        {"name": "gpus", "firstAvailable": [exactly(name="a", selectors=[{"cel": {}}])]},
        "devices.requests[0].firstAvailable[0].selectors[0].cel.expression",
        "required",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("request_", "field", "words"), REQUEST_ERRORS)
def test_a_bad_template_request_names_the_field(
    request_: dict[str, Any], field: str, words: str
) -> None:
    body = template_body([request_])
    raises(
        lambda: dra.claim_template(body),
        where="ResourceClaimTemplate/ml/h100-x4",
        field=f"spec.spec.{field}",
        words=words,
    )


@pytest.mark.parametrize(("request_", "field", "words"), REQUEST_ERRORS)
def test_a_bad_claim_request_names_the_field(
    request_: dict[str, Any], field: str, words: str
) -> None:
    body = claim_body([request_])
    raises(
        lambda: dra.resource_claim(body),
        where="ResourceClaim/ml/train-0-gpus-x7k2p",
        field=f"spec.{field}",
        words=words,
    )


def test_a_request_named_twice_names_the_second() -> None:
    body = template_body([{"name": "gpus", "exactly": exactly()}] * 2)
    raises(
        lambda: dra.claim_template(body),
        where="ResourceClaimTemplate/ml/h100-x4",
        field="spec.spec.devices.requests[1].name",
        words="named twice",
    )


# -- ResourceClaim status -----------------------------------------------------------


ALLOCATED = {
    "allocation": {
        "devices": {
            "results": [
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "h100-0000",
                 "device": f"gpu-{i}"}
                for i in range(4)
            ]
        },
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["h100-0000"]}]}]},
    },
    "reservedFor": [
        {"resource": "pods", "name": "train-0", "uid": "u-1"},
        {"apiGroup": "example.com", "resource": "pods", "name": "not-a-pod", "uid": "u-2"},
        {"apiGroup": "batch", "resource": "jobs", "name": "train", "uid": "u-3"},
    ],
}  # fmt: skip


def test_an_allocated_claim_reads_its_devices_and_pods() -> None:
    got = dra.resource_claim(claim_body([{"name": "gpus", "exactly": exactly(4, H100)}], ALLOCATED))
    assert got == ResourceClaim(
        "ml",
        "train-0-gpus-x7k2p",
        (DeviceRequest("gpus", "gpu.nvidia.com", 4, False, (H100,)),),
        tuple(AllocatedDevice("gpus", "gpu.nvidia.com", "h100-0000", f"gpu-{i}") for i in range(4)),
        ("ml/train-0",),
    )


def test_an_unallocated_claim_holds_nothing() -> None:
    got = dra.resource_claim(claim_body([{"name": "gpus", "exactly": exactly()}]))
    assert (got.allocated, got.reserved_for) == ((), ())


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (
            lambda s: s["allocation"]["devices"]["results"][2].pop("pool"),
            "status.allocation.devices.results[2].pool",
            "required",
        ),
        (
            lambda s: s["allocation"]["devices"]["results"][0].update(device=None, request=4),
            "status.allocation.devices.results[0].request",
            "expected a string",
        ),
        (
            lambda s: s["allocation"]["devices"].update(results={}),
            "status.allocation.devices.results",
            "expected a list",
        ),
        (
            lambda s: s["reservedFor"][0].pop("name"),
            "status.reservedFor[0].name",
            "required",
        ),
        (lambda s: s.update(reservedFor=["pod"]), "status.reservedFor[0]", "expected an object"),
    ],
)
def test_a_bad_claim_status_names_the_field(edit: Any, field: str, words: str) -> None:
    status = copy.deepcopy(ALLOCATED)
    edit(status)
    body = claim_body([{"name": "gpus", "exactly": exactly()}], status)
    raises(
        lambda: dra.resource_claim(body),
        where="ResourceClaim/ml/train-0-gpus-x7k2p",
        field=field,
        words=words,
    )


# -- round trips ----------------------------------------------------------------------

names = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)
expressions = st.text(min_size=1, max_size=30)


@st.composite
def exact_requests(draw: st.DrawFn, name: str | None = None) -> DeviceRequest:
    every = draw(st.booleans())
    return DeviceRequest(
        name=draw(names) if name is None else name,
        device_class=draw(names),
        count=1 if every else draw(st.integers(1, 64)),
        all_devices=every,
        selectors=tuple(draw(st.lists(expressions, max_size=3))),
    )


@st.composite
def requests(draw: st.DrawFn) -> tuple[DeviceRequest, ...]:
    request_names = draw(st.lists(names, min_size=0, max_size=4, unique=True))
    out = []
    for name in request_names:
        if draw(st.booleans()):
            out.append(draw(exact_requests(name)))
        else:
            subs = draw(st.lists(names, min_size=1, max_size=3, unique=True))
            out.append(
                DeviceRequest(name, alternatives=tuple(draw(exact_requests(s)) for s in subs))
            )
    return tuple(out)


def _exact_body(request: DeviceRequest, *, with_name: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "deviceClassName": request.device_class,
        "selectors": [{"cel": {"expression": s}} for s in request.selectors],
    }
    if with_name:
        body["name"] = request.name
    if request.all_devices:
        body["allocationMode"] = "All"
    elif request.count != 1 or with_name:  # count 1 is the default: leave it out sometimes
        body["count"] = request.count
    return body


def requests_body(requests_: tuple[DeviceRequest, ...]) -> list[dict[str, Any]]:
    """How the API writes these requests: the inverse of what kube/dra.py reads."""
    out: list[dict[str, Any]] = []
    for request in requests_:
        if request.alternatives:
            subs = [_exact_body(a, with_name=True) for a in request.alternatives]
            out.append({"name": request.name, "firstAvailable": subs})
        else:
            out.append({"name": request.name, "exactly": _exact_body(request, with_name=False)})
    return out


@given(requests(), names, names)
def test_template_requests_round_trip(
    requests_: tuple[DeviceRequest, ...], namespace: str, name: str
) -> None:
    body = template_body(requests_body(requests_), name)
    body["metadata"]["namespace"] = namespace
    assert dra.claim_template(body) == ClaimTemplate(namespace, name, requests_)


@given(
    requests(),
    st.lists(st.tuples(names, names, names, names), max_size=5).map(
        lambda rows: tuple(AllocatedDevice(*row) for row in rows)
    ),
    st.lists(names, max_size=3, unique=True),
)
def test_claims_round_trip(
    requests_: tuple[DeviceRequest, ...], allocated: tuple[AllocatedDevice, ...], pods: list[str]
) -> None:
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": a.request, "driver": a.driver, "pool": a.pool, "device": a.device}
                    for a in allocated
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods],
    }
    got = dra.resource_claim(claim_body(requests_body(requests_), status))
    assert got == ResourceClaim(
        "ml", "train-0-gpus-x7k2p", requests_, allocated, tuple(f"ml/{p}" for p in pods)
    )


attribute_values = st.one_of(
    st.booleans().map(lambda v: {"bool": v}),
    st.integers(-(2**40), 2**40).map(lambda v: {"int": v}),
    st.text(max_size=20).map(lambda v: {"string": v}),
    st.tuples(st.integers(0, 99), st.integers(0, 99), st.integers(0, 99)).map(
        lambda v: {"version": ".".join(map(str, v))}
    ),
)
attribute_names = st.one_of(names, st.builds(lambda d, n: f"{d}.io/{n}", names, names))


@given(
    st.dictionaries(
        names,
        st.tuples(
            st.dictionaries(attribute_names, attribute_values, max_size=4),
            st.dictionaries(attribute_names, st.integers(0, 2**40), max_size=2),
        ),
        max_size=4,
    ),
    names,
)
def test_slice_devices_read_as_the_core_reads_them_from_the_slice(
    raw: dict[str, tuple[dict[str, Any], dict[str, int]]], driver: str
) -> None:
    body = {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": driver,
            "nodeName": "n",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": name,
                    "attributes": attributes,
                    "capacity": {k: {"value": str(v)} for k, v in capacity.items()},
                }
                for name, (attributes, capacity) in raw.items()
            ],
        },
    }
    got = dra.resource_slice(body)
    assert (got.name, got.driver, got.pool, got.node) == ("s", driver, "p", "n")
    expected = [
        Device.from_slice(
            driver, name, attributes, {k: {"value": str(v)} for k, v in capacity.items()}
        )
        for name, (attributes, capacity) in raw.items()
    ]
    assert [d.name for d in got.devices] == [d.name for d in expected]
    assert [d.equivalence_key for d in got.devices] == [d.equivalence_key for d in expected]


# -- a pod's spec.resourceClaims ------------------------------------------------------


def test_a_pod_template_reads_its_claims_by_template_and_by_name() -> None:
    spec = {
        "containers": [{"name": "train", "resources": {"claims": [{"name": "gpus"}]}}],
        "resourceClaims": [
            {"name": "gpus", "resourceClaimTemplateName": "h100-x4"},
            {"name": "shared", "resourceClaimName": "nic-pool"},
        ],
    }
    assert objects.pod_template(spec).resource_claims == (
        PodClaim("gpus", template_name="h100-x4"),
        PodClaim("shared", claim_name="nic-pool"),
    )
    assert objects.pod_template({"containers": []}).resource_claims == ()


@pytest.mark.parametrize(
    ("entry", "field", "words"),
    [
        ({"name": "gpus"}, "resourceClaims[1]", "exactly one of"),
        (
            {"name": "gpus", "resourceClaimName": "a", "resourceClaimTemplateName": "b"},
            "resourceClaims[1]",
            "exactly one of",
        ),
        ({"resourceClaimName": "a"}, "resourceClaims[1].name", "needs a name"),
        (
            {"name": "gpus", "resourceClaimTemplateName": 4},
            "resourceClaims[1].resourceClaimTemplateName",
            "expected a string",
        ),
        ({"name": "ok", "resourceClaimName": "a"}, "resourceClaims[1].name", "named twice"),
        ("gpus", "resourceClaims[1]", "expected an object"),
    ],
)
def test_a_bad_pod_claim_names_its_entry(entry: Any, field: str, words: str) -> None:
    spec = {"containers": [], "resourceClaims": [{"name": "ok", "resourceClaimName": "x"}, entry]}
    with pytest.raises(InputError) as caught:
        objects.pod_template(spec)
    assert caught.value.field == field
    assert words in caught.value.detail


def pod(claims: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "ml"},
        "spec": {
            "containers": [{"name": "train", "resources": {"claims": [{"name": "gpus"}]}}],
            "resourceClaims": claims,
        },
        "status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "c-1"}]},
    }


def test_a_member_pod_keeps_its_claims_through_the_controllers_slim_copy() -> None:
    body = pod([{"name": "gpus", "resourceClaimTemplateName": "h100-x4"}])
    slim = slim_pod(body)
    assert slim["spec"]["resourceClaims"] == body["spec"]["resourceClaims"]
    assert slim["status"]["resourceClaimStatuses"] == body["status"]["resourceClaimStatuses"]
    assert member_pod(slim).template.resource_claims == (PodClaim("gpus", template_name="h100-x4"),)


def test_a_pods_bad_claim_is_named_from_its_spec() -> None:
    with pytest.raises(InputError) as caught:
        member_pod(pod([{"name": "gpus"}]))
    assert caught.value.field == "spec.resourceClaims[0]"


# -- the snapshot ---------------------------------------------------------------------


def test_a_translated_snapshot_holds_the_four_kinds() -> None:
    items = [
        devices.device_class("gpu.nvidia.com", "gpu"),
        h100_slice("h100-0000"),
        h100_slice("h100-0001"),
        claim_body([{"name": "gpus", "exactly": exactly(4, H100)}], ALLOCATED),
        template_body([{"name": "gpus", "exactly": exactly(4, H100)}]),
    ]
    located = [Located(f"document {i}", obj) for i, obj in enumerate(items)]
    snapshot = translate(located, now=0.0).snapshot
    assert [c.name for c in snapshot.device_classes] == ["gpu.nvidia.com"]
    assert [(s.node, len(s.devices)) for s in snapshot.resource_slices] == [
        ("h100-0000", 8),
        ("h100-0001", 8),
    ]
    assert isinstance(snapshot.resource_slices[0], ResourceSlice)
    assert [(c.name, len(c.allocated)) for c in snapshot.resource_claims] == [
        ("train-0-gpus-x7k2p", 4)
    ]
    assert [(t.namespace, t.name) for t in snapshot.claim_templates] == [("ml", "h100-x4")]


def test_a_bad_dra_object_fails_plan_naming_its_document_and_field_or_is_skipped() -> None:
    bad = template_body([{"name": "gpus", "exactly": exactly(0)}])
    located = [Located("dump.yaml document 2", bad)]
    with pytest.raises(InputError) as caught:
        translate(located, now=0.0)
    assert caught.value.where == "dump.yaml document 2"
    assert caught.value.field == "spec.spec.devices.requests[0].exactly.count"
    skipped: list[InputError] = []
    snapshot = translate(located, now=0.0, skip=skipped.append).snapshot
    assert snapshot.claim_templates == ()
    assert [e.field for e in skipped] == ["spec.spec.devices.requests[0].exactly.count"]


# -- the controller's state ------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "body"),
    [
        (resources.RESOURCE_SLICE, h100_slice()),
        (resources.RESOURCE_CLAIM, claim_body([{"name": "gpus", "exactly": exactly()}])),
        (resources.DEVICE_CLASS, devices.device_class("gpu.nvidia.com", "gpu")),
        (
            resources.RESOURCE_CLAIM_TEMPLATE,
            template_body([{"name": "gpus", "exactly": exactly()}]),
        ),
    ],
)
def test_a_dra_watch_event_wakes_the_cycle_as_a_pod_event_does(
    resource: resources.Resource, body: dict[str, Any]
) -> None:
    state = ClusterState()
    raw = {k: v for k, v in body.items() if k not in ("kind", "apiVersion")}  # as kopf gives it
    feed(state, resource, "ADDED", raw)
    assert state.changed.is_set()
    key = (resource.kind, raw["metadata"].get("namespace", ""), raw["metadata"]["name"])
    held = state.get(*key)
    assert held is not None
    assert (held["apiVersion"], held["kind"]) == (API, resource.kind)
    state.changed.clear()
    feed(state, resource, "DELETED", raw)
    assert state.changed.is_set()
    assert state.get(*key) is None


def test_a_pod_with_claims_counts_as_a_gpu_user_for_gpu_health() -> None:
    def pod(spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c"}], **spec},
        }

    claims = {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "h100-x4"}]}
    assert member_pod(pod(claims)).uses_gpus
    assert not member_pod(pod({})).uses_gpus
