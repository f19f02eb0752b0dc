"""schemathesis hooks of `.ci/schemathesis.sh` (loaded through SCHEMATHESIS_HOOKS).

The `Idempotency-Key` values the fuzzer draws collide ("0", "A", ...). A second request with
a key replays the first answer, by design (docs/api.md §1.6); when a test has deleted since
what that first request created (a key, revoked), schemathesis reads the replayed creation
as "created resource not found" (ST302). So every drawn key of the documented shape gets a
suffix unique to the run (at generation: the case's own data, so schemathesis' checks see
what is sent): each request is its own. Keys of another shape (the negative tests of the
header) are sent as drawn. Replays themselves are tested by `gateway/tests/api.rs`.
"""

import itertools
import re

import schemathesis

_KEY = re.compile(r"^[!-~]{1,128}$")
_MAX_LEN = 128
_counter = itertools.count()


@schemathesis.hook
def map_headers(context, headers):
    if not headers:
        return headers
    for name in list(headers):
        value = headers[name]
        if name.lower() == "idempotency-key" and isinstance(value, str) and _KEY.match(value):
            suffix = f"~{next(_counter)}"
            headers[name] = value[: _MAX_LEN - len(suffix)] + suffix
    return headers
