"""Preemption: which running gangs to evict so that a waiting gang fits.

``preemptor`` runs the search for one gang; ``fairvictims`` chooses victims in
a fair-sharing cohort, by share, over ``victims``, which lists the candidates
the policies allow and finds a set that makes the gang fit.
"""
