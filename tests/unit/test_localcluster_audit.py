"""The local cluster's optional audit log (`local-cluster up --audit-policy`)."""

from __future__ import annotations

from pathlib import Path

from queue_controller.localcluster import components
from queue_controller.localcluster.pki import Pki


def _wiring(tmp_path: Path, policy: Path | None) -> components.Wiring:
    return components.Wiring(
        ports={name: 1000 + i for i, name in enumerate(components.PORTS)},
        pki=Pki(tmp_path / "pki"),
        kubeconfig=tmp_path / "kubeconfig",
        data_dir=tmp_path,
        stages=tmp_path / "stages.yaml",
        audit_policy=policy,
    )


def test_the_api_server_keeps_no_audit_log_unless_asked(tmp_path: Path) -> None:
    args = components.arguments("kube-apiserver", _wiring(tmp_path, None))
    assert not [a for a in args if a.startswith("--audit")]


def test_an_audit_policy_gives_a_json_audit_log_under_logs(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    args = components.arguments("kube-apiserver", _wiring(tmp_path, policy))
    assert f"--audit-policy-file={policy.resolve()}" in args
    assert f"--audit-log-path={tmp_path / 'logs' / 'audit.log'}" in args
    assert "--audit-log-format=json" in args
