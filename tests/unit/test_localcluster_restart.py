"""`LocalCluster.restart` stops one component by its recorded PID and starts it again
with the same arguments and ports (the fault suite restarts kube-apiserver)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from queue_controller.localcluster import cluster as cluster_module
from queue_controller.localcluster import state as state_module
from queue_controller.localcluster.cluster import ClusterError, LocalCluster
from queue_controller.localcluster.state import Layout, State


def _layout(tmp_path: Path) -> Layout:
    return Layout(bin_dir=tmp_path / "bin", state_dir=tmp_path / "state", stages=tmp_path)


def test_restart_refuses_an_unknown_component(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="unknown component 'kubelet'"):
        LocalCluster(_layout(tmp_path), report=lambda _: None).restart("kubelet")


def test_restart_refuses_a_component_that_is_not_running(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    layout.state_dir.mkdir()
    State(pids={"etcd": 999_999_999}).save(layout.state_file)
    with pytest.raises(ClusterError, match="etcd is not running"):
        LocalCluster(layout, report=lambda _: None).restart("etcd")


def test_restart_replaces_the_process_and_keeps_its_arguments_and_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = _layout(tmp_path)
    layout.bin_dir.mkdir()
    sleep = shutil.which("sleep")
    assert sleep is not None
    # A stand-in "etcd": our check of a PID reads the binary's name and directory.
    shutil.copy(sleep, layout.bin_dir / "etcd")
    (layout.state_dir / "logs").mkdir(parents=True)
    seen: list[tuple[dict[str, int], Path]] = []

    def arguments(name: str, wiring: cluster_module.components.Wiring) -> list[str]:
        seen.append((dict(wiring.ports), wiring.data_dir))
        return ["60"]

    monkeypatch.setattr(cluster_module.components, "arguments", arguments)
    monkeypatch.setattr(cluster_module.components, "healthy", lambda *_: True)
    local = LocalCluster(layout, report=lambda _: None)
    first = local._spawn("etcd", ["60"])
    ports = {"etcd": 2379, "etcd-peer": 2380}
    State(ports=ports, pids={"etcd": first}).save(layout.state_file)
    try:
        second = local.restart("etcd")
        assert second != first
        assert not state_module.ours(first, (layout.bin_dir / "etcd").resolve())
        saved = State.load(layout.state_file)
        assert saved is not None
        assert saved.pids == {"etcd": second}
        assert saved.ports == ports
        assert seen == [(ports, layout.state_dir.resolve())]
        assert local.status().running == {"etcd": True}
    finally:
        local.down()


def test_the_ports_a_cluster_starts_on_are_all_different() -> None:
    from queue_controller.localcluster import components
    from queue_controller.localcluster.state import free_ports

    for _ in range(20):
        ports = free_ports(components.PORTS)
        assert len(set(ports.values())) == len(ports) == len(tuple(components.PORTS))
