"""The scenario and its inputs: what a simulation is asked to replay.

``spec`` is the scenario itself (cluster, queues, quotas, workload, faults);
``inputs``, ``trace`` and ``topologyspec`` read it from files, ``generate``
makes a synthetic workload and the bundled scenario, ``setup`` puts them
together for the CLI, ``policy`` reads policy presets and ``rules`` is what the
scenario fixes for a whole run (each policy's placer, who may preempt).

``gpus`` (GPU-equivalents, the one currency of every measure) and ``dra`` (the
DRA view of the cluster's GPUs) sit here, at the bottom, rather than in
:mod:`..world`: a scenario carries its ``DraCluster``, and the world and
measurement count in GPU-equivalents.
"""
