"""The planted bugs of bench/sim_plants.py (issue 35 item 5) stay usable: every patch in
bench/plants applies cleanly to HEAD (``git apply --check`` against HEAD's tree in a temporary
index, so neither the working tree nor the real index is read or touched), touches product code
only, and the plant list (bench/plants/plants.toml) and the patches agree. Cheap: no sweep, no
oracle run (``bench/sim_plants.py --check`` runs the oracles).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from bench.sim_plants import PLANTS_DIR, load_plants, patch_files

REPO = Path(__file__).resolve().parents[2]
PLANTS = load_plants()
#: the six classes issue 35 names, each planted at least once
CLASSES = {
    "reassign-removes-before-isr",
    "commit-from-old-generation",
    "cleaner-drops-latest",
    "fetch-above-hw",
    "state-write-no-epoch-fence",
    "dedup-last-batch-only",
}
#: the product's packages: a plant patches nothing else (never sim/ nor tests/)
PRODUCT = ("broker/", "controller/", "client/", "zk/")


@pytest.fixture(scope="module")
def head_index(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a git index holding HEAD's tree, apart from the repository's own."""
    index = tmp_path_factory.mktemp("plants") / "index"
    env = dict(os.environ, GIT_INDEX_FILE=str(index))
    subprocess.run(["git", "-C", str(REPO), "read-tree", "HEAD"], env=env, check=True)
    return env


def test_the_plant_list_and_the_patches_agree() -> None:
    patches = {p.stem for p in PLANTS_DIR.glob("*.patch")}
    assert patches == set(PLANTS), "plants.toml and bench/plants/*.patch differ"
    assert {p.klass for p in PLANTS.values()} >= CLASSES
    windows = sorted(int(m.group(1)) for n in PLANTS if (m := re.match(r"w33-(\d+)-", n)))
    assert windows == list(range(1, 12)), "one plant per window of issue 33"
    for plant in PLANTS.values():
        assert plant.description and plant.klass, plant.name
        assert plant.patch.read_text().startswith(f"# plant {plant.name} "), plant.name
        if plant.name.startswith("w33-"):
            assert plant.fix, f"{plant.name} names the commit that fixed its window"


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_each_patch_applies_to_head_and_touches_product_code_only(
    name: str, head_index: dict[str, str]
) -> None:
    plant = PLANTS[name]
    files = patch_files(plant.patch)
    assert files and all(f.startswith(PRODUCT) for f in files), files
    done = subprocess.run(
        ["git", "-C", str(REPO), "apply", "--cached", "--check", str(plant.patch)],
        env=head_index,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"{plant.patch.name} does not apply to HEAD:\n{done.stderr}"


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_each_oracle_names_a_test_that_exists(name: str) -> None:
    for node in PLANTS[name].oracle:
        path, _, test = node.partition("::")
        source = REPO / path
        assert path.startswith("tests/") and source.exists(), node
        assert re.search(rf"^(async )?def {re.escape(test)}\(", source.read_text(), re.MULTILINE), node
