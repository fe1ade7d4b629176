"""Topology-aware placement: the domains (racks, blocks) that hold a gang.

``slices`` splits a gang into the pieces each domain takes; ``domaintree``
keeps the tree of domains over node classes; ``domains`` chooses among them.
What a gang asks (its levels and mode) is :mod:`...rules.topology`; this
package decides which domains satisfy it, and looks down on
:mod:`..nodeclasses` and :mod:`..shapes`.
"""
