"""Node-pool files: GPU resources and labels as the device plugin and GFD publish them."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from queue_controller import nodepools
from queue_controller.errors import InputError
from queue_controller.nodepools import Gpu, NodePools, Pool, mig_slices

ROOT = Path(__file__).resolve().parents[2]
H100 = {"product": "NVIDIA-H100-80GB-HBM3", "count": 8, "memoryMiB": 81559, "family": "hopper"}
A100 = {"product": "NVIDIA-A100-SXM4-80GB", "count": 8, "memoryMiB": 81920, "family": "ampere"}


def test_the_default_node_file_has_the_four_pools() -> None:
    pools = nodepools.load(ROOT / "deploy/local-cluster/nodes.yaml")
    by_name = {p.name: p for p in pools.pools}
    assert set(by_name) == {"h100", "a100-mig", "l4", "gb200"}
    assert by_name["gb200"].allocatable()["nvidia.com/gpu"] == "4"
    assert by_name["h100"].allocatable()["nvidia.com/gpu"] == "8"
    assert by_name["a100-mig"].allocatable()["nvidia.com/mig-3g.40gb"] == "8"
    assert by_name["l4"].allocatable()["nvidia.com/gpu"] == "16"  # 4 GPUs x 4 replicas


def test_whole_gpu_node_gets_gfd_labels() -> None:
    labels = Gpu.model_validate(H100).labels()
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["nvidia.com/mig.strategy"] == "none"
    assert labels["nvidia.com/gpu.compute.major"] == "9"


@pytest.mark.parametrize(
    ("profile", "memory", "expected"),
    [
        ("1g.10gb", 81920, (1, 1)),
        ("1g.20gb", 81920, (1, 2)),
        ("2g.20gb", 81920, (2, 2)),
        ("3g.40gb", 81920, (3, 4)),
        ("7g.80gb", 81920, (7, 8)),
        ("1g.5gb", 40960, (1, 1)),
        ("3g.20gb", 40960, (3, 4)),
        ("1g.18gb", 144384, (1, 1)),
        ("3g.71gb", 144384, (3, 4)),
        ("1g.10gb+me", 81920, (1, 1)),
    ],
)
def test_mig_profiles_map_to_compute_and_memory_slices(
    profile: str, memory: int, expected: tuple[int, int]
) -> None:
    assert mig_slices(profile, memory) == expected


@pytest.mark.parametrize(
    ("devices", "valid"),
    [
        ({"1g.10gb": 7}, True),  # all-1g.10gb
        ({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, True),  # all-balanced
        ({"3g.40gb": 2}, True),
        ({"7g.80gb": 1}, True),
        ({"3g.40gb": 2, "1g.10gb": 1}, False),  # two 3g leave no room
        ({"1g.10gb": 8}, False),  # 1g can start at slices 0..6 only
        ({"2g.20gb": 3, "1g.10gb": 2}, False),  # 8 slices, but a 1g cannot start at 7
        ({"4g.40gb": 1, "3g.40gb": 1}, True),
        ({"4g.40gb": 2}, False),
        ({"1g.10gb+me": 2}, False),  # at most one +me per GPU
    ],
)
def test_mig_layouts_are_checked_against_slice_placement(
    devices: dict[str, int], valid: bool
) -> None:
    spec = {**A100, "mig": {"devices": devices}}
    if valid:
        Gpu.model_validate(spec)
    else:
        with pytest.raises(ValidationError):
            Gpu.model_validate(spec)


def test_mixed_mig_advertises_one_resource_per_profile() -> None:
    gpu = Gpu.model_validate(
        {**A100, "mig": {"devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}}
    )
    assert gpu.resources() == {
        "nvidia.com/mig-1g.10gb": 16,
        "nvidia.com/mig-2g.20gb": 8,
        "nvidia.com/mig-3g.40gb": 8,
    }
    labels = gpu.labels()
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig.config.state"] == "success"
    assert labels["nvidia.com/mig-3g.40gb.count"] == "8"
    assert labels["nvidia.com/mig-3g.40gb.memory"] == "40960"


def test_single_mig_advertises_instances_as_gpus() -> None:
    gpu = Gpu.model_validate({**A100, "mig": {"strategy": "single", "devices": {"3g.40gb": 2}}})
    assert gpu.resources() == {"nvidia.com/gpu": 16}


def test_time_slicing_multiplies_or_renames() -> None:
    l4 = {"product": "NVIDIA-L4", "count": 4, "memoryMiB": 23034, "family": "ada-lovelace"}
    plain = Gpu.model_validate({**l4, "sharing": {"replicas": 4}})
    assert plain.resources() == {"nvidia.com/gpu": 16}
    assert plain.labels()["nvidia.com/gpu.product"] == "NVIDIA-L4-SHARED"
    renamed = Gpu.model_validate({**l4, "sharing": {"replicas": 4, "renameByDefault": True}})
    assert renamed.resources() == {"nvidia.com/gpu.shared": 16}
    assert renamed.labels()["nvidia.com/gpu.product"] == "NVIDIA-L4"


def test_mig_and_sharing_do_not_mix() -> None:
    with pytest.raises(ValidationError, match="cannot be combined"):
        Gpu.model_validate({**A100, "mig": {"devices": {"7g.80gb": 1}}, "sharing": {"replicas": 2}})


def test_nodes_carry_pool_labels_taints_and_kwok_annotation() -> None:
    pools = NodePools(
        pools=[
            Pool(
                name="h100",
                count=2,
                gpu=Gpu.model_validate(H100),
                taints=[{"key": "gpu", "effect": "NoSchedule"}],
            ),  # type: ignore[list-item]
            Pool(name="broken", count=1, ready=False),
        ]
    )
    nodes = pools.nodes()
    assert [n["metadata"]["name"] for n in nodes] == ["h100-0000", "h100-0001", "broken-0000"]
    first = nodes[0]
    assert first["metadata"]["labels"]["kubernetes.io/hostname"] == "h100-0000"
    assert first["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert first["spec"]["taints"] == [{"key": "gpu", "effect": "NoSchedule"}]
    assert first["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert nodes[2]["metadata"]["annotations"] == {}  # kwok leaves it NotReady


def test_pools_resize_for_benchmarks() -> None:
    pools = nodepools.load(ROOT / "deploy/local-cluster/nodes.yaml")
    big = pools.resized({"h100": 800, "a100-mig": 150, "l4": 50, "gb200": 0})
    assert big.node_count() == 1000
    assert len(big.nodes()) == 1000
    with pytest.raises(InputError, match="no pool named b200"):
        pools.resized({"b200": 1})


def test_bad_file_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text("pools:\n- name: h100\n  count: -1\n")
    with pytest.raises(InputError) as caught:
        nodepools.load(path)
    assert caught.value.where == str(path)
    assert caught.value.field == "pools.0.count"
    path.write_text("pools:\n- name: h100\n  count: 1\n  cpu: lots\n")
    with pytest.raises(InputError, match="cpu"):
        nodepools.load(path)
    path.write_text("pools:\n- {name: a, count: 1}\n- {name: a, count: 2}\n")
    with pytest.raises(InputError, match="unique"):
        nodepools.load(path)
    with pytest.raises(InputError, match="no such file"):
        nodepools.load(tmp_path / "missing.yaml")


def test_default_nodes_sit_in_racks_blocks_and_cliques() -> None:
    nodes = nodepools.load(ROOT / "deploy/local-cluster/nodes.yaml").nodes()
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}

    def domains(pool: str, key: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name, of in sorted(labels.items()):
            if name.startswith(f"{pool}-"):
                out.setdefault(of[key], []).append(name)
        return out

    racks = domains("h100", nodepools.RACK_LABEL)
    assert racks == {
        f"h100-rack-{r}": [f"h100-{2 * r:04d}", f"h100-{2 * r + 1:04d}"] for r in range(4)
    }
    assert sorted(domains("h100", nodepools.BLOCK_LABEL)) == ["h100-block-0", "h100-block-1"]
    assert labels["h100-0003"][nodepools.BLOCK_LABEL] == "h100-block-0"
    assert labels["h100-0004"][nodepools.BLOCK_LABEL] == "h100-block-1"
    cliques = domains("gb200", nodepools.CLIQUE_LABEL)
    assert {k: len(v) for k, v in cliques.items()} == {"gb200-nvl-0.1": 4, "gb200-nvl-1.1": 4}
    assert labels["gb200-0000"]["nvidia.com/gpu.product"] == "NVIDIA-GB200"
    assert all(nodepools.RACK_LABEL in of for of in labels.values())


def test_a_pool_without_topology_has_no_topology_labels() -> None:
    pools = NodePools(pools=[Pool(name="x", count=1, gpu=Gpu.model_validate(H100))])
    (node,) = pools.nodes()
    assert not {nodepools.RACK_LABEL, nodepools.BLOCK_LABEL, nodepools.CLIQUE_LABEL} & set(
        node["metadata"]["labels"]
    )
