"""Fetching dcgm-exporter targets (or a Prometheus ``/federate`` URL) and merging them.

A target that cannot be read is one line in :attr:`Scrape.errors`, never an
exception: one dead exporter must not hide the GPUs of every other node.
Targets are fetched a few at a time, so dead ones cost one timeout, not one
each; the result does not depend on which answered first.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from queue_controller.errors import InputError
from queue_controller.gpuhealth.dcgm import GpuSample, Parsed, parse

# Ask for the classic text format; OpenMetrics is still read if a server
# insists.  No Accept-Encoding: urllib would not undo gzip.
ACCEPT = "text/plain;version=0.0.4;q=1.0, application/openmetrics-text;version=1.0.0;q=0.5"
OPENMETRICS = "application/openmetrics-text"
# A federate answer for a large cluster is a few MiB; far more means a wrong URL.
MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class Fetched:
    text: str
    content_type: str = ""


# (url, timeout in seconds) -> the body; raises OSError (URLError included),
# ValueError, http.client.HTTPException or InputError on failure.
Opener = Callable[[str, float], Fetched]


@dataclass(frozen=True, slots=True, kw_only=True)
class Scrape:
    samples: list[GpuSample]  # by (host, gpu)
    errors: list[str]  # "http://x:9400/metrics: connection refused", in the order of the URLs
    skipped: int = 0  # series without a host or gpu label, over all targets


def http_get(url: str, timeout: float) -> Fetched:
    """The body at ``url`` over HTTP(S) (or ``file:``), decoded by its charset."""
    request = urllib.request.Request(url, headers={"Accept": ACCEPT})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read(MAX_BYTES + 1)
        if len(body) > MAX_BYTES:
            raise InputError(f"answer larger than {MAX_BYTES // (1024 * 1024)} MiB", where=url)
        charset = response.headers.get_content_charset() or "utf-8"
        content_type = response.headers.get_content_type() or ""
    try:
        text = body.decode(charset)
    except (LookupError, UnicodeDecodeError) as exc:
        raise InputError(f"answer is not {charset} text", where=url) from exc
    return Fetched(text=text, content_type=content_type)


def _describe(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, InputError):
        # Its own text already starts with the URL it was raised for.
        return exc.detail if not exc.field else f"{exc.field}: {exc.detail}"
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    reason: object = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout:g}s"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror[0].lower() + reason.strerror[1:]
    return str(reason) or type(reason).__name__


def _one(url: str, timeout: float, opener: Opener) -> Parsed | str:
    try:
        fetched = opener(url, timeout)
        openmetrics = fetched.content_type.startswith(OPENMETRICS)
        return parse(fetched.text, source=url, openmetrics=openmetrics)
    except (OSError, ValueError, http.client.HTTPException, InputError) as exc:
        return f"{url}: {_describe(exc, timeout)}"


def scrape(
    urls: Sequence[str],
    *,
    timeout: float = 5.0,
    opener: Opener = http_get,
    workers: int = 8,
) -> Scrape:
    """Fetch and parse every URL; the GPUs of all that answered, one line per one that did not.

    When two targets report the same (host, gpu) the one later in ``urls``
    wins: list a Prometheus federate URL first and direct exporters after it
    to prefer the exporters' fresher values.
    """
    if timeout <= 0:
        raise InputError(f"must be positive, got {timeout:g}", field="timeout")
    results: list[Parsed | str] = []
    if urls:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(urls)))) as pool:
            # map keeps the order of urls, whatever order they answer in.
            results = list(pool.map(lambda url: _one(url, timeout, opener), urls))
    merged: dict[tuple[str, int], GpuSample] = {}
    errors: list[str] = []
    skipped = 0
    for result in results:
        if isinstance(result, str):
            errors.append(result)
            continue
        skipped += result.skipped
        merged.update(((s.host, s.gpu), s) for s in result.samples)
    return Scrape(samples=[merged[k] for k in sorted(merged)], errors=errors, skipped=skipped)
