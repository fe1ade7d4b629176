import pytest

from queue_controller.core.model.objects import Container, PodTemplate
from queue_controller.core.rules.requests import pod_request
from queue_controller.errors import InvalidSpecError

GPU = "nvidia.com/gpu"


def pod(*containers: Container, init: tuple[Container, ...] = (), overhead=None) -> PodTemplate:  # type: ignore[no-untyped-def]
    return PodTemplate(containers=containers, init_containers=init, overhead=overhead or {})


def test_limits_alone_mean_request_equals_limit() -> None:
    request = pod_request(pod(Container("train", limits={GPU: "4", "cpu": "2"})))
    assert request[GPU] == 4000
    assert request["cpu"] == 2000


def test_every_pod_takes_one_pod_slot() -> None:
    assert pod_request(pod(Container("a"), Container("b")))["pods"] == 1000


def test_gpu_requests_without_limits_are_invalid_and_name_container_and_resource() -> None:
    with pytest.raises(InvalidSpecError) as caught:
        pod_request(pod(Container("trainer", requests={GPU: "2"})))
    assert "'trainer'" in str(caught.value)
    assert GPU in str(caught.value)
    assert caught.value.field == f"containers[trainer].resources.limits[{GPU}]"


def test_gpu_requests_different_from_limits_are_invalid() -> None:
    with pytest.raises(InvalidSpecError, match=r"requests 2 nvidia\.com/gpu but limits it to 4"):
        pod_request(pod(Container("trainer", requests={GPU: 2}, limits={GPU: 4})))


@pytest.mark.parametrize("amount", ["0.5", "500m", "1.5", 1.5])
def test_fractional_gpus_are_invalid(amount: str | float) -> None:
    with pytest.raises(InvalidSpecError, match="whole numbers"):
        pod_request(pod(Container("trainer", limits={GPU: amount})))


def test_equal_gpu_quantities_in_different_spellings_are_fine() -> None:
    request = pod_request(pod(Container("t", requests={GPU: "1000m"}, limits={GPU: "1"})))
    assert request[GPU] == 1000


def test_native_resources_may_be_overcommitted() -> None:
    request = pod_request(pod(Container("t", requests={"cpu": "1"}, limits={"cpu": "4"})))
    assert request["cpu"] == 1000


def test_mig_resources_follow_extended_rules() -> None:
    with pytest.raises(InvalidSpecError, match="without a limit"):
        pod_request(pod(Container("t", requests={"nvidia.com/mig-1g.10gb": 1})))


def test_bad_quantity_names_its_field() -> None:
    with pytest.raises(InvalidSpecError) as caught:
        pod_request(pod(Container("t", requests={"cpu": "lots"})))
    assert caught.value.field == "containers[t].resources.requests[cpu]"


def test_negative_quantity_is_invalid() -> None:
    with pytest.raises(InvalidSpecError, match="negative"):
        pod_request(pod(Container("t", requests={"cpu": "-1"})))


def test_containers_add_up() -> None:
    request = pod_request(
        pod(Container("a", limits={GPU: 2}), Container("b", requests={"cpu": "1"}, limits={GPU: 1}))
    )
    assert request[GPU] == 3000
    assert request["cpu"] == 1000


def test_init_containers_without_sidecars_take_the_maximum() -> None:
    request = pod_request(
        pod(
            Container("app", requests={"cpu": "2", "memory": "1Gi"}),
            init=(
                Container("fetch", requests={"cpu": "3"}),
                Container("warm", requests={"memory": "4Gi"}),
            ),
            overhead={"cpu": "250m"},
        )
    )
    # max(app, max(init)) + overhead, per resource
    assert request["cpu"] == 3250
    assert request["memory"] == 4 * 2**30 * 1000


def test_sidecars_run_beside_later_init_containers_and_the_app() -> None:
    """KEP-753: S accumulates sidecars; init_i = req_i + S for ordinary init containers."""
    request = pod_request(
        pod(
            Container("app", requests={"cpu": "1"}),
            init=(
                Container("prepare", requests={"cpu": "2"}),  # before the sidecar: 2
                Container("proxy", requests={"cpu": "1"}, restart_policy="Always"),  # S = 1
                Container("migrate", requests={"cpu": "3"}),  # 3 + S = 4
            ),
            overhead={"cpu": "500m"},
        )
    )
    # max(app + S = 2, max(2, 1, 4) = 4) + 0.5
    assert request["cpu"] == 4500


def test_sidecars_add_to_the_app_when_they_dominate() -> None:
    request = pod_request(
        pod(
            Container("app", limits={GPU: 1}, requests={"cpu": "4"}),
            init=(
                Container("log", requests={"cpu": "1"}, restart_policy="Always"),
                Container("mesh", requests={"cpu": "1"}, restart_policy="Always"),
            ),
        )
    )
    assert request["cpu"] == 6000  # app 4 + sidecars 2
    assert request[GPU] == 1000


def test_gpu_in_an_init_container_counts_through_the_maximum() -> None:
    request = pod_request(
        pod(Container("app", limits={GPU: 1}), init=(Container("probe", limits={GPU: 2}),))
    )
    assert request[GPU] == 2000
