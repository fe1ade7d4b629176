"""The core's vocabulary: quantities, resource vectors, the objects, DRA objects, decisions.

The bottom of the core: these modules import nothing of the core outside this
package.  Inside it they look downward only: ``decisions`` names the objects,
``objects`` (the snapshot, workloads, nodes, quotas) names the DRA objects of
``dra``, which check a device's version with ``kubecel``'s ``Semver``, and all
of them count in ``quantity`` and ``resources``.

``kubecel`` (the values and functions of Kubernetes' CEL library: quantities
and semantic versions) sits here rather than in :mod:`..devices` because the
DRA objects use its ``Semver`` when they are built; the interpreter that
evaluates selectors with it is :mod:`..devices.dracel`.
"""
