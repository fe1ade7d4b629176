"""What a run measures, and the report's data.

``results`` holds the report's data classes (the bottom: the report and the
engine both read them); ``measure`` the allocation and waste series,
``domainmeter`` topology, ``fluid`` the fluid upper bound, ``sharing`` the
lenders' reclaim times and team shares, and ``outcome`` what a run leaves behind
(journal entries, its result).
"""
