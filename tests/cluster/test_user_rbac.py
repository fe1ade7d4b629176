"""The chart's roles for people (templates/user-rbac.yaml), tried as the people would.

The ClusterRoles and bindings are rendered from the chart and created for real; the
cluster's own aggregation controller folds the user roles into the built-in view, edit
and admin roles. Then kubectl impersonates (``--as``, ``--as-group``):

- alice, a namespace editor (the built-in ``edit``, bound in her namespace);
- bob, a namespace admin (the built-in ``admin``);
- carol, a quota administrator (in the group bound to quota-admin);
- dave, any authenticated user, bound to nothing.

Behaviour is checked with the controller running: a Job alice submits is admitted and she
watches its PodGroup; a Job cannot use another namespace's Queue; and a PodGroup made or
edited by hand, even by a cluster admin who may write its status, admits nothing the
quota refuses.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.cluster.conftest import Cluster
from tests.cluster.workloads import GPU, GROUP, VERSION, Objects, eventually, h100, job
from tests.deploy.chart import render

pytestmark = pytest.mark.cluster

RELEASE = "qc-people"
ROLE = f"{RELEASE}-queue-controller"
QUOTA_ADMINS = "qc-test-quota-admins"
AUTHENTICATED = "system:authenticated"
PEOPLE = {
    "alice": (AUTHENTICATED,),
    "bob": (AUTHENTICATED,),
    "carol": (AUTHENTICATED, QUOTA_ADMINS),
    "dave": (AUTHENTICATED,),
}
OURS = "queue-controller.io"


def kubectl(
    cluster: Cluster, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cluster.kubectl_binary), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def as_(
    cluster: Cluster, user: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl as ``user``, in the groups a real login would give them."""
    groups = [f"--as-group={g}" for g in PEOPLE[user]]
    return kubectl(cluster, f"--as={user}", *groups, *args, stdin=stdin)


def refused(result: subprocess.CompletedProcess[str]) -> bool:
    return result.returncode != 0 and "forbidden" in result.stderr.lower()


def can_i(cluster: Cluster, user: str, verb: str, what: str, *flags: str) -> bool:
    result = as_(cluster, user, "auth", "can-i", verb, what, *flags)
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), result.stderr
    return answer == "yes"


@pytest.fixture(scope="module")
def user_roles(cluster: Cluster, crds: None) -> Iterator[list[dict[str, Any]]]:
    """The chart's roles for people, created for real, and aggregated into view/edit/admin."""
    docs = render(
        f"userRoles.quotaAdmin.subjects[0].kind=Group,userRoles.quotaAdmin.subjects[0].name={QUOTA_ADMINS}",
        "userRoles.quotaAdmin.subjects[0].apiGroup=rbac.authorization.k8s.io",
        release=RELEASE,
    )
    ours = [
        d
        for d in docs
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding") and d["metadata"]["name"] != ROLE
    ]
    assert sorted(d["metadata"]["name"] for d in ours) == sorted(
        [f"{ROLE}-user", *[f"{ROLE}-quota-{r}" for r in ("viewer", "admin")] * 2]
    )
    applied = kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(ours))
    assert applied.returncode == 0, applied.stderr

    def aggregated() -> bool:
        for built_in in ("view", "edit", "admin"):
            role = json.loads(kubectl(cluster, "get", "clusterrole", built_in, "-o", "json").stdout)
            resources = {r for rule in role["rules"] for r in rule.get("resources", [])}
            if not {"podgroups", "queues", "teamquotas", "cohorts", "topologies"} <= resources:
                return False
        return True

    eventually(aggregated, timeout=60, what="view, edit and admin to aggregate the user roles")
    try:
        yield ours
    finally:
        for doc in ours:
            kubectl(
                cluster,
                "delete",
                doc["kind"].lower(),
                doc["metadata"]["name"],
                "--ignore-not-found",
            )


def bind(cluster: Cluster, namespace: str, user: str, role: str) -> None:
    """A RoleBinding of a built-in ClusterRole to ``user`` in ``namespace``."""
    client.RbacAuthorizationV1Api(cluster.api).create_namespaced_role_binding(
        namespace,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{user}-{role}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


@pytest.fixture
def people(cluster: Cluster, namespace: str, user_roles: list[dict[str, Any]]) -> str:
    """alice edits and bob administers ``namespace``; carol and dave have no binding in it."""
    bind(cluster, namespace, "alice", "edit")
    bind(cluster, namespace, "bob", "admin")
    return namespace


@pytest.fixture
def elsewhere(cluster: Cluster) -> Iterator[str]:
    """A second namespace, alice's as well."""
    name = f"elsewhere-{secrets.token_hex(3)}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        batch = cluster.batch
        for item in batch.list_namespaced_job(name).items:
            batch.delete_namespaced_job(item.metadata.name, name, propagation_policy="Background")
        cluster.core.delete_namespace(name)


def as_json(body: dict[str, Any]) -> str:
    return json.dumps(body)


def pod_group_body(name: str, queue: str, min_member: int, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"queue": queue, "minMember": min_member},
        **({"status": status} if status else {}),
    }


# -- what each person may do, as the API server answers ------------------------------

STATUS = [
    (verb, f"{plural}.{OURS}", ("--subresource=status",))
    for plural in ("podgroups", "queues", "teamquotas")
    for verb in ("update", "patch")
]
WRITES = ("create", "update", "patch", "delete")


def test_what_each_person_may_do(cluster: Cluster, people: str) -> None:
    ns = ("-n", people)
    expected: list[tuple[str, str, str, tuple[str, ...], bool]] = []
    for user in ("alice", "bob"):
        expected += [
            (user, v, f"{r}.{OURS}", ns, True)
            for v in ("get", "list", "watch")
            for r in ("queues", "podgroups")
        ]
        expected += [
            (user, v, f"{r}.{OURS}", (), True)
            for v in ("get", "list", "watch")
            for r in ("teamquotas", "cohorts", "topologies")
        ]
        expected += [
            (user, v, f"{r}.{OURS}", ns, False) for v in WRITES for r in ("queues", "podgroups")
        ]
        expected += [
            (user, v, f"{r}.{OURS}", (), False)
            for v in WRITES
            for r in ("teamquotas", "cohorts", "topologies")
        ]
        expected += [(user, v, r, (*ns, *f), False) for v, r, f in STATUS]
        expected += [(user, "create", "jobs.batch", ns, True)]
        expected += [(user, "list", f"podgroups.{OURS}", ("-n", "default"), False)]
    expected += [
        ("carol", v, f"{r}.{OURS}", ("-A",), True)
        for v in WRITES
        for r in ("teamquotas", "cohorts", "topologies", "queues")
    ]
    expected += [("carol", v, f"podgroups.{OURS}", ("-A",), v == "get") for v in ("get", *WRITES)]
    expected += [("carol", v, r, ("-A", *f), False) for v, r, f in STATUS]
    expected += [
        ("dave", "list", f"{r}.{OURS}", (), True) for r in ("teamquotas", "cohorts", "topologies")
    ]
    expected += [("dave", "list", f"{r}.{OURS}", ns, False) for r in ("queues", "podgroups")]
    expected += [("dave", v, r, (*ns, *f), False) for v, r, f in STATUS]
    wrong = [
        (user, verb, what, " ".join(flags), allowed)
        for user, verb, what, flags, allowed in expected
        if can_i(cluster, user, verb, what, *flags) != allowed
    ]
    assert not wrong, f"(user, verb, resource, flags, expected) answered otherwise: {wrong}"


# -- a namespace editor submits a queued Job and watches its PodGroup -----------------


def test_a_namespace_editor_submits_a_queued_job_and_watches_its_pod_group(
    cluster: Cluster, people: str, objects: Objects
) -> None:
    team = objects.team_quota(8)
    objects.queue("q", team)
    body = job("train", queue="q", gpus=4, pods=2, nodes=h100(0))
    made = as_(cluster, "alice", "create", "-n", people, "-f", "-", stdin=as_json(body))
    assert made.returncode == 0, made.stderr
    eventually(
        lambda: as_(cluster, "alice", "get", "podgroup", "train", "-n", people).returncode == 0,
        what="alice to see her Job's PodGroup",
    )
    # kubectl wait lists and watches the object: what `kubectl get -w` needs too.
    waited = as_(
        cluster, "alice", "wait", "podgroup/train", "-n", people,
        "--for=jsonpath={.status.phase}=Running", "--timeout=60s",
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    listed = as_(cluster, "alice", "get", "podgroups,queues", "-n", people, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    kinds = sorted(i["kind"] for i in json.loads(listed.stdout)["items"])
    assert kinds == ["PodGroup", "Queue"]
    # Her quota, cluster-scoped, is hers to read: what it holds and what it uses.
    used = as_(cluster, "alice", "get", "teamquota", team, "-o", "jsonpath={.status.used}")
    assert used.returncode == 0, used.stderr
    assert json.loads(used.stdout) == {GPU: "8"}
    # Not another namespace's gangs.
    assert refused(as_(cluster, "alice", "get", "podgroups", "-n", "default"))


# -- nobody but the controller writes status ------------------------------------------


def test_people_cannot_write_pod_group_queue_or_team_quota_status(
    cluster: Cluster, people: str, objects: Objects
) -> None:
    team = objects.team_quota(8)
    objects.queue("q", team)
    objects.api.create_namespaced_custom_object(
        GROUP, VERSION, people, "podgroups", pod_group_body("by-hand", "q", 1)
    )
    status = json.dumps({"status": {"phase": "Admitted", "placement": {"h100-0000": 1}}})
    counts = json.dumps({"status": {"used": {GPU: "0"}, "admittedGangs": 0}})
    targets = [
        ("podgroup", "by-hand", ("-n", people), status),
        ("queue", "q", ("-n", people), counts),
        ("teamquota", team, (), counts),
    ]
    for user in ("alice", "bob", "carol", "dave"):
        for kind, name, flags, patch in targets:
            result = as_(
                cluster, user, "patch", kind, name, *flags,
                "--subresource=status", "--type=merge", "-p", patch,
            )  # fmt: skip
            assert refused(result), f"{user} patched {kind}/{name} status: {result.stdout}"
    # Nor through the object itself (a status subresource drops it there anyway).
    result = as_(
        cluster, "alice", "patch", "podgroup", "by-hand", "-n", people, "--type=merge", "-p", status
    )
    assert refused(result), result.stdout
    group = objects.pod_group("by-hand")
    assert group is not None
    assert group.get("status", {}).get("phase") in (None, "Pending")


# -- only quota administrators write TeamQuotas, Cohorts and Queues -------------------


def test_the_editor_cannot_write_a_team_quota(
    cluster: Cluster, people: str, objects: Objects
) -> None:
    team = objects.team_quota(8)
    quota = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TeamQuota",
        "metadata": {"name": f"alices-{secrets.token_hex(2)}"},
        "spec": {"resources": {GPU: {"nominal": 1000}}},
    }
    cohort = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Cohort", "metadata": {"name": "alices"}}
    queue = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Queue",
        "metadata": {"name": "mine"},
        "spec": {"teamQuota": team},
    }
    more = json.dumps({"spec": {"resources": {GPU: {"nominal": 1000}}}})
    for user in ("alice", "bob", "dave"):
        assert refused(as_(cluster, user, "create", "-f", "-", stdin=as_json(quota)))
        assert refused(as_(cluster, user, "patch", "teamquota", team, "--type=merge", "-p", more))
        assert refused(as_(cluster, user, "delete", "teamquota", team))
        assert refused(as_(cluster, user, "create", "-f", "-", stdin=as_json(cohort)))
        # A Queue chooses which TeamQuota its namespace spends: not the namespace's to choose.
        assert refused(as_(cluster, user, "create", "-n", people, "-f", "-", stdin=as_json(queue)))
    nominal = objects.api.get_cluster_custom_object(GROUP, VERSION, "teamquotas", team)
    assert nominal["spec"]["resources"][GPU]["nominal"] == 8
    # The quota administrator may.
    made = as_(cluster, "carol", "create", "-f", "-", stdin=as_json(quota))
    assert made.returncode == 0, made.stderr
    objects.quotas.append(quota["metadata"]["name"])
    made = as_(cluster, "carol", "create", "-n", people, "-f", "-", stdin=as_json(queue))
    assert made.returncode == 0, made.stderr
    patched = as_(cluster, "carol", "patch", "teamquota", team, "--type=merge", "-p", more)
    assert patched.returncode == 0, patched.stderr


# -- a Job cannot use another namespace's Queue ---------------------------------------


def test_a_job_cannot_use_another_namespaces_queue(
    cluster: Cluster, people: str, objects: Objects, elsewhere: str
) -> None:
    team = objects.team_quota(16)
    objects.queue("shared", team)  # in `people`, alice's team's namespace
    bind(cluster, elsewhere, "alice", "edit")
    body = job("borrow", queue="shared", gpus=1, pods=1, nodes=h100(1))
    made = as_(cluster, "alice", "create", "-n", elsewhere, "-f", "-", stdin=as_json(body))
    assert made.returncode == 0, made.stderr
    group = eventually(
        lambda: (
            (g := _pod_group(objects, elsewhere, "borrow"))
            and g.get("status", {}).get("reason")
            and g
        ),
        what="the Job's PodGroup to say why it waits",
    )
    assert group["status"]["phase"] == "Pending"
    assert group["status"]["reason"] == "QueueNotFound"
    assert f"Queue {elsewhere}/shared does not exist" in group["status"]["message"]
    time.sleep(3)  # three more cycles
    assert cluster.batch.read_namespaced_job("borrow", elsewhere).spec.suspend is True
    quota = objects.api.get_cluster_custom_object(GROUP, VERSION, "teamquotas", team)
    assert quota.get("status", {}).get("used", {}).get(GPU, "0") == "0"
    # A queue label cannot name a namespace: a label value has no "/".
    body = job("spelled", queue=f"{people}/shared", gpus=1, pods=1, nodes=h100(1))
    made = as_(cluster, "alice", "create", "-n", elsewhere, "-f", "-", stdin=as_json(body))
    assert made.returncode != 0
    assert "Invalid value" in made.stderr, made.stderr


def _pod_group(objects: Objects, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = objects.api.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "podgroups", name
        )
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return None
        raise
    return found


# -- a PodGroup made or edited by hand admits nothing the quota refuses ----------------


def test_a_hand_made_pod_group_cannot_admit_a_gang_the_quota_refuses(
    cluster: Cluster, people: str, objects: Objects
) -> None:
    objects.queue("q", objects.team_quota(8))
    nodes = h100(2, 3)
    # alice may not make one at all.
    sketch = pod_group_body("big", "q", 1)
    assert refused(as_(cluster, "alice", "create", "-n", people, "-f", "-", stdin=as_json(sketch)))
    # Someone who may (a cluster admin) makes it before the Job: a gang of one, already
    # Admitted onto two nodes. The API server drops a status sent with a create.
    forged = pod_group_body("big", "q", 1, phase="Admitted", placement={nodes[0]: 1, nodes[1]: 1})
    made = kubectl(cluster, "create", "-n", people, "-f", "-", stdin=as_json(forged))
    assert made.returncode == 0, made.stderr
    # alice's Job: two members of 8 GPUs, 16 of a quota of 8.
    body = job("big", queue="q", gpus=8, pods=2, nodes=nodes)
    made = as_(cluster, "alice", "create", "-n", people, "-f", "-", stdin=as_json(body))
    assert made.returncode == 0, made.stderr

    def refused_by_quota() -> dict[str, Any] | None:
        group = objects.pod_group("big")
        status = (group or {}).get("status", {})
        return (
            group
            if (status.get("phase"), status.get("reason")) == ("Pending", "QuotaExceeded")
            else None
        )

    eventually(refused_by_quota, what="the quota to refuse the gang, whatever its minMember")
    # A cluster admin writes the admission into its status by hand (kubectl's own field
    # manager, as `kubectl patch` or `kubectl edit --subresource=status` records it).
    admitted = {
        "status": {
            "phase": "Admitted",
            "reason": "Admitted",
            "placement": {nodes[0]: 1, nodes[1]: 1},
            "admittedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    }
    patched = kubectl(
        cluster, "patch", "podgroup", "big", "-n", people,
        "--subresource=status", "--type=merge", "-p", json.dumps(admitted),
    )  # fmt: skip
    assert patched.returncode == 0, patched.stderr
    eventually(refused_by_quota, what="the controller to undo the hand-written admission")
    deadline = time.monotonic() + 4  # four more cycles
    while time.monotonic() < deadline:
        assert cluster.batch.read_namespaced_job("big", people).spec.suspend is True
        time.sleep(0.5)
    selector = "batch.kubernetes.io/job-name=big"
    assert not cluster.core.list_namespaced_pod(people, label_selector=selector).items
