"""Cluster credentials for processes that talk to the API through the gateway.

Like the gateway, this module may import the Kubernetes client: it is the
node agent's way in, and holds the same rule as the controller's start-up
(``controller.operator.connect``): a kubeconfig file if one is named, else
the pod's service account, else ``~/.kube/config``.
"""

from __future__ import annotations

from pathlib import Path

from kubernetes import client, config

from queue_controller.errors import QueueControllerError


class CredentialsError(QueueControllerError):
    """No usable credentials: the process cannot reach the cluster at all."""


def api_client(kubeconfig: Path | None = None, *, connections: int = 10) -> client.ApiClient:
    """An API client with credentials loaded into the client's default configuration,
    keeping up to ``connections`` connections open (as many as calls made at once: past
    the pool's size, urllib3 opens a connection per call and throws it away)."""
    try:
        if kubeconfig is not None:
            config.load_kube_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        else:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
            except config.ConfigException:
                config.load_kube_config()  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError) as error:
        raise CredentialsError(f"no usable cluster credentials: {error}") from None
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)
