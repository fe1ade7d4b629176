"""The ResourceSlices the local cluster publishes, in the shape NVIDIA's DRA driver uses."""

import re
from pathlib import Path

from queue_controller import nodepools
from queue_controller.localcluster import devices
from queue_controller.nodepools import Pool

ROOT = Path(__file__).resolve().parents[2]
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
H100 = {"product": "NVIDIA-H100-80GB-HBM3", "count": 8, "memoryMiB": 81559, "family": "hopper"}
A100_MIG = {
    "product": "NVIDIA-A100-SXM4-80GB",
    "count": 8,
    "memoryMiB": 81920,
    "family": "ampere",
    "mig": {"devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
}


def pool(gpu: dict[str, object] | None, name: str = "h100", count: int = 2) -> Pool:
    return Pool.model_validate({"name": name, "count": count, "gpu": gpu})


def by_name(slice_: dict[str, object]) -> dict[str, dict[str, object]]:
    spec = slice_["spec"]
    assert isinstance(spec, dict)
    return {d["name"]: d for d in spec["devices"]}


def test_a_whole_gpu_node_publishes_one_slice_of_its_gpus() -> None:
    made = devices.resource_slice(pool(H100), 1)
    assert made is not None
    assert made["apiVersion"] == "resource.k8s.io/v1"
    assert made["metadata"] == {"name": "h100-0001-gpu.nvidia.com"}
    spec = made["spec"]
    assert spec["driver"] == "gpu.nvidia.com"
    assert spec["nodeName"] == "h100-0001"
    assert spec["pool"] == {"name": "h100-0001", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == [f"gpu-{i}" for i in range(8)]
    gpu3 = by_name(made)["gpu-3"]
    attributes = gpu3["attributes"]
    assert isinstance(attributes, dict)
    assert attributes["type"] == {"string": "gpu"}
    assert attributes["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert attributes["architecture"] == {"string": "Hopper"}
    assert attributes["index"] == {"int": 3}
    assert attributes["driverVersion"] == {"version": "570.124.6"}
    assert attributes["cudaComputeCapability"] == {"version": "9.0.0"}
    assert re.fullmatch(
        r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", attributes["uuid"]["string"]
    )
    assert gpu3["capacity"] == {"memory": {"value": "81559Mi"}}


def test_uuids_are_stable_and_differ_between_gpus_and_nodes() -> None:
    def uuids(index: int) -> list[str]:
        made = devices.resource_slice(pool(H100), index)
        assert made is not None
        return [d["attributes"]["uuid"]["string"] for d in made["spec"]["devices"]]

    assert uuids(0) == uuids(0)  # a restarted cluster publishes the same devices
    assert len(set(uuids(0)) | set(uuids(1))) == 16


def test_a_mig_node_publishes_its_mig_devices_not_its_gpus() -> None:
    made = devices.resource_slice(pool(A100_MIG, name="a100-mig"), 0)
    assert made is not None
    listed = made["spec"]["devices"]
    assert len(listed) == 8 * 4  # 2x 1g.10gb + 2g.20gb + 3g.40gb on each of 8 GPUs
    assert all(d["attributes"]["type"] == {"string": "mig"} for d in listed)
    assert all(DNS_LABEL.match(d["name"]) for d in listed)
    assert len({d["name"] for d in listed}) == len(listed)
    assert len({d["attributes"]["uuid"]["string"] for d in listed}) == len(listed)
    big = by_name(made)["gpu-5-mig-3g40gb-0"]
    attributes = big["attributes"]
    assert isinstance(attributes, dict)
    assert attributes["profile"] == {"string": "3g.40gb"}
    assert attributes["parentIndex"] == {"int": 5}
    assert attributes["uuid"]["string"].startswith("MIG-")
    assert attributes["productName"] == {"string": "NVIDIA A100 SXM4 80GB"}
    assert attributes["architecture"] == {"string": "Ampere"}
    assert big["capacity"] == {"memory": {"value": "40960Mi"}}  # 4 of 8 memory slices
    # The parent is named by the UUID the GPU would have as a whole GPU.
    whole = devices.resource_slice(
        pool({**A100_MIG, "mig": None}, name="a100-mig"),
        0,
    )
    assert whole is not None
    assert attributes["parentUUID"] == by_name(whole)["gpu-5"]["attributes"]["uuid"]  # type: ignore[index]


def test_a_mig_profile_with_media_extensions_gets_a_dns_label_name() -> None:
    gpu = {**A100_MIG, "mig": {"devices": {"1g.10gb+me": 1, "3g.40gb": 1}}}
    made = devices.resource_slice(pool(gpu, name="a100-mig"), 0)
    assert made is not None
    assert "gpu-0-mig-1g10gbme-0" in by_name(made)


def test_a_node_without_gpus_publishes_nothing() -> None:
    assert devices.resource_slice(pool(None, name="cpu"), 0) is None


def test_the_default_node_file_gives_a_slice_for_every_gpu_node_and_both_classes() -> None:
    pools = nodepools.load(ROOT / "deploy/local-cluster/nodes.yaml")
    made = devices.objects(pools.pools)
    classes = {o["metadata"]["name"]: o for o in made if o["kind"] == "DeviceClass"}
    assert set(classes) == {"gpu.nvidia.com", "mig.nvidia.com"}
    assert classes["mig.nvidia.com"]["spec"]["selectors"] == [
        {
            "cel": {
                "expression": 'device.driver == "gpu.nvidia.com" && '
                'device.attributes["gpu.nvidia.com"].type == "mig"'
            }
        }
    ]
    slices = {o["spec"]["nodeName"] for o in made if o["kind"] == "ResourceSlice"}
    assert slices == {n["metadata"]["name"] for n in pools.nodes()}
    l4 = next(
        o for o in made if o["kind"] == "ResourceSlice" and o["spec"]["nodeName"] == "l4-0000"
    )
    # Time-slicing is the device plugin's: the DRA driver publishes the 4 physical GPUs.
    assert len(l4["spec"]["devices"]) == 4
    assert l4["spec"]["devices"][0]["attributes"]["architecture"] == {"string": "Ada Lovelace"}
