"""Episode identity: stable ids, what changes them and what does not."""

from rlmdistill.collect import config as config_mod
from rlmdistill.collect.config import CollectConfig, episode_id, episode_seed


def _cfg(**kw) -> CollectConfig:
    return CollectConfig(
        rooms=["/r"], root="openai:a@http://h/v1", sub="openai:b@http://h/v1", **kw
    )


def test_episode_id_is_stable_and_keyed_by_room_task_sample():
    a = episode_id(_cfg(), "roomhash", "task", 0)
    assert a == episode_id(_cfg(), "roomhash", "task", 0)
    assert len(a) == 20
    assert (
        len(
            {
                a,
                episode_id(_cfg(), "other", "task", 0),
                episode_id(_cfg(), "roomhash", "t2", 0),
                episode_id(_cfg(), "roomhash", "task", 1),
            }
        )
        == 4
    )


def test_concurrency_and_room_paths_do_not_change_ids_but_sampling_and_prompt_do(monkeypatch):
    base = episode_id(_cfg(), "h", "t", 0)
    assert episode_id(_cfg(concurrency=16), "h", "t", 0) == base
    assert episode_id(_cfg().model_copy(update={"rooms": ["/moved"]}), "h", "t", 0) == base
    assert episode_id(_cfg(seed=1), "h", "t", 0) != base
    assert episode_id(_cfg(few_shot=True), "h", "t", 0) != base
    monkeypatch.setattr(config_mod, "PROMPT_VERSION", "rlm-dd-test")
    assert episode_id(_cfg(), "h", "t", 0) != base


def test_episode_seed_is_31_bit_and_depends_on_base_seed():
    s0, s1 = episode_seed(_cfg(), "h", "t", 0), episode_seed(_cfg(seed=1), "h", "t", 0)
    assert s0 != s1 and 0 <= s0 < 2**31 and 0 <= s1 < 2**31
    assert episode_seed(_cfg(), "h", "t", 1) != s0


def test_episode_seed_pairs_arms_that_differ_only_in_the_root():
    base = _cfg()
    tuned = base.model_copy(update={"root": "local:qwen2.5-coder-0.5b+adapter=/tmp/a"})
    assert episode_id(base, "h", "t", 0) != episode_id(tuned, "h", "t", 0)
    assert episode_seed(base, "h", "t", 0) == episode_seed(tuned, "h", "t", 0)
