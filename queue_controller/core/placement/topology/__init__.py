"""Topology-aware placement: the domains (racks, blocks) that hold a gang.

``slices`` splits a gang into the pieces each domain takes; ``domaintree``
keeps the tree of domains over node classes; ``domains`` chooses among them;
``groups`` keeps a group of pod sets (a leader and its workers) in one of them.
What a gang asks (its levels and mode) is :mod:`...rules.topology`; this
package decides which domains satisfy it, and looks down on
:mod:`..nodeclasses` and :mod:`..shapes`.
"""
