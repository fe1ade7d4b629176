"""The shape of every pending gang's pod sets, as the placer sees them.

Thousands of pending gangs are alike: each distinct template, request and topology ask is
shaped once, and each topology request resolved once, however many gangs share it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from queue_controller.core.cycle.devicecatalog import DeviceCatalog
from queue_controller.core.model.objects import PodTemplate, Queue, Topology
from queue_controller.core.placement.shapes import GangShape, SetShape, shape_of
from queue_controller.core.rules.prepared import Prepared
from queue_controller.core.rules.topology import Refusal, TopologyAsk, group_refusal, resolve


def gang_shapes(
    pending: Iterable[Prepared],
    queues: Mapping[tuple[str, str], Queue],
    topologies: Iterable[Topology],
    devices: DeviceCatalog | None,
) -> tuple[dict[str, tuple[SetShape, ...]], dict[str, Refusal]]:
    """Workload key -> its pod sets' shapes; and workload key -> why its topology request
    cannot be met as written (such a gang has no shapes)."""
    shapes: dict[str, tuple[SetShape, ...]] = {}
    # Gangs whose topology request cannot be met as written: workload key -> refusal.
    refused: dict[str, Refusal] = {}
    by_name = {t.name: t for t in topologies}
    by_template: dict[tuple[object, ...], GangShape] = {}
    asked: dict[tuple[object, ...], TopologyAsk | Refusal] = {}
    # Nearly every gang has one pod set and asks for no topology, and a cycle without
    # DRA adds nothing to what a template requests (rules/prepared.py): such a gang's
    # shape is its template's, found by the template alone.
    plain: dict[PodTemplate, GangShape] = {}
    sole: dict[tuple[object, ...], GangShape | Refusal] = {}
    for p in pending:
        if p.error:
            continue
        pod_sets = p.workload.pod_sets
        if devices is None and len(pod_sets) == 1 and pod_sets[0].topology is None:
            template = pod_sets[0].template
            shape = plain.get(template)
            if shape is None:
                shape = plain[template] = shape_of(template, p.requests[0])
            shapes[p.workload.key] = (SetShape(pod_sets[0], shape),)
            continue
        # Half the gangs of a big cluster ask for a topology, most with one pod set: such a
        # gang's outcome (its shape, or why its request cannot be met) is found by its
        # template, request, Queue and size alone, without hashing the Queue or the
        # request's resources again for each (the general path below).
        sole_key: tuple[object, ...] | None = None
        if devices is None and len(pod_sets) == 1:
            only = pod_sets[0]
            sole_key = (
                only.template,
                only.topology,
                p.workload.namespace,
                p.workload.queue,
                only.count,
                only.min_count,
            )
            known = sole.get(sole_key)
            if isinstance(known, GangShape):
                shapes[p.workload.key] = (SetShape(only, known),)
                continue
            if known is not None:
                refused[p.workload.key] = known
                continue
        sets = []
        queue = queues.get((p.workload.namespace, p.workload.queue))
        grouped = False
        for index, (pod_set, request) in enumerate(
            zip(p.workload.pod_sets, p.requests, strict=True)
        ):
            ask = None
            if pod_set.topology is not None and queue is not None:
                grouped = grouped or bool(pod_set.topology.group)
                several = len(p.workload.pod_sets) > 1
                # Thousands of gangs ask alike: each request is resolved once.
                of_set = pod_set.name if several else ""
                request_key = (
                    pod_set.topology,
                    queue,
                    pod_set.count,
                    pod_set.min_count,
                    of_set,
                )
                resolved = asked.get(request_key)
                if resolved is None:
                    resolved = asked[request_key] = resolve(
                        pod_set.topology,
                        pod_set=pod_set,
                        queue=queue,
                        topologies=by_name,
                        several_sets=several,
                    )
                if isinstance(resolved, Refusal):
                    refused.setdefault(p.workload.key, resolved)
                    continue
                ask = resolved
            labels = p.labels[index] if p.labels else {}
            memo = (pod_set.template, tuple(sorted(request.items())), ask, p.workload.namespace)
            shape = by_template.get(memo)
            if shape is None:
                shape = by_template[memo] = shape_of(
                    pod_set.template,
                    request,
                    ask,
                    devices=devices.dims if devices is not None else None,
                    labels=labels,
                )
            sets.append(SetShape(pod_set, shape))
        if grouped and p.workload.key not in refused:
            # Kueue's rules across a group's pod sets (rules/topology.py), once all are read.
            grouping = group_refusal(pod_sets)
            if grouping is not None:
                refused[p.workload.key] = grouping
        if p.workload.key not in refused:
            shapes[p.workload.key] = tuple(sets)
        if sole_key is not None:
            sole[sole_key] = refused.get(p.workload.key) or sets[0].shape
    return shapes, refused
