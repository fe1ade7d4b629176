"""``plan`` with admission fair sharing: the decayed usage is read from each Queue's status
in the dump, and a TeamQuota's Queue that has used less goes first, though its gang is newer."""

from __future__ import annotations

import json

from tests.plan.harness import DUMPS, invoke, plan_json

NAME = "admission-fair-sharing.yaml"


def decided(stdin: str) -> dict[str, str]:
    result = invoke("plan", "-f", "-", "--now", "2026-12-01T00:00:00Z", "-o", "json", stdin=stdin)
    assert result.exit_code == 0, result.output
    return {d["workload"]: d["decision"] for d in json.loads(result.stdout)["decisions"]}


def test_the_queue_that_used_less_goes_first_though_its_gang_is_newer() -> None:
    decisions = {d["workload"]: d for d in plan_json(NAME)}
    assert decisions["nlp/new"]["decision"] == "Admit"
    assert decisions["vision/old"]["decision"] == "Pending"


def test_the_weight_divides_the_usage() -> None:
    text = (DUMPS / NAME).read_text()
    heavier = text.replace("  fairSharing:\n    weight: 1\n", "  fairSharing:\n    weight: 4\n")
    assert heavier != text
    assert decided(heavier) == {"vision/old": "Admit", "nlp/new": "Pending"}


def test_without_admission_fair_sharing_the_older_gang_goes_first() -> None:
    text = (DUMPS / NAME).read_text()
    start = text.index("  admissionFairSharing:")
    end = text.index("---", start)
    plain = text[:start] + text[end:]
    assert decided(plain) == {"vision/old": "Admit", "nlp/new": "Pending"}
