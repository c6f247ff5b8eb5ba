"""Mutation fuzzing of the command line (python/tests/mutation_fuzz/cli_cases.py): ``zarr-device
info`` (plain and --json) and ``zarr-device convert`` on mutated stores end with exit status 0 or
1 and no traceback; a failed convert leaves nothing where DEST would be, a successful one a DEST
that reads as the mutated source reads; neither changes the source's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutation_fuzz import StoredArray, build_corpus, default_specs
from mutation_fuzz.cli_cases import run_cli_cases

pytest.importorskip("zarr")
pytest.importorskip("zarr_device")

SEED = 20261203
CASES = 400  # one child process runs them: about 12 s on a busy 2-core machine
MAX_SECONDS = 40.0
TIMEOUT = 20.0  # seconds a case may take (three commands and two reads of a small array)

# Known failures, by iteration of SEED: run on their own below (xfail, strict: fixing one fails
# its test until it is taken off this list). None today: a folder where a chunk file should be
# (iterations 309, 378, 379) once converted as fill values, and a claimed shape of 2^32 columns
# (iteration 19) once ran for hours; both are fixed and checked by the main test.
KNOWN: dict[int, str] = {}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[StoredArray]:
    return build_corpus(tmp_path_factory.mktemp("corpus"), default_specs())


def test_info_and_convert_on_mutated_stores(corpus: list[StoredArray], tmp_path: Path) -> None:
    iterations = [i for i in range(CASES) if i not in KNOWN]
    outcomes = run_cli_cases(SEED, iterations, corpus, tmp_path, max_seconds=MAX_SECONDS, timeout=TIMEOUT)
    assert len(outcomes) >= 10
    bad = [o for o in outcomes if o.violations]
    assert not bad, f"{len(bad)} of {len(outcomes)} cases break the rule:\n\n" + "\n\n".join(
        o.describe(reproducer=i < 3) for i, o in enumerate(bad[:8]))
    # Both ways out are exercised: some converts fail (typed), some succeed and are compared.
    converts = [o.result["commands"]["convert"]["status"] for o in outcomes if o.result]
    assert 0 in converts and 1 in converts
    assert any(o.result and "differ" in o.result["reads"] for o in outcomes)


@pytest.mark.parametrize("iteration", [19, 309, 378, 379])
def test_cases_that_once_failed(iteration: int, corpus: list[StoredArray], tmp_path: Path) -> None:
    outcomes = run_cli_cases(SEED, [iteration], corpus, tmp_path, timeout=5.0)
    assert not outcomes[0].violations, outcomes[0].describe()
