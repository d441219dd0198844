"""The end-to-end training study's data (issue 50): a generated two-topic
sentence task, the same from the same seed, balanced, learnable to 100% from
its words, and tokenized once, by MiniLM's real tokenizer or a fixed table."""
import numpy as np
import pytest

from fwcompare.core import models
from fwcompare.studies.end_to_end import data


def test_the_same_seed_makes_the_same_task_and_another_seed_another():
    a, b = data.make_task(7, 300, 100), data.make_task(7, 300, 100)
    assert a.train[0] == b.train[0] and (a.train[1] == b.train[1]).all()
    assert a.eval[0] == b.eval[0]
    assert data.make_task(8, 300, 100).train[0] != a.train[0]
    # the eval split does not move when the train split grows
    assert data.make_task(7, 900, 100).eval[0] == a.eval[0]


def test_the_labels_are_balanced_and_the_words_decide_them():
    task = data.make_task(0, 4000, 1000)
    texts, labels = task.train
    assert 0.45 < labels.mean() < 0.55
    topic_of = {w: i for i, (name, parts) in enumerate(data.TOPICS.items())
                for words in parts for w in words}
    for text, label in zip(texts, labels):
        counts = np.bincount([topic_of[w] for w in text.rstrip(".").split() if w in topic_of],
                             minlength=2)
        assert counts.sum() == len(data.SLOTS) and counts.argmax() == label, text
    # mixed sentences exist (3 against 2): the task is not solved by one word
    mixed = sum(1 for t in texts if min(np.bincount(
        [topic_of[w] for w in t.rstrip(".").split() if w in topic_of], minlength=2)) == 2)
    assert 0.2 < mixed / len(texts) < 0.6


def test_a_bad_share_is_refused():
    with pytest.raises(ValueError, match="own_share"):
        data.make_task(0, 10, 10, own_share=0.4)


@pytest.mark.frameworks("torch")
@pytest.mark.skipif(models.not_installed("all-minilm-l6-v2") != "", reason="MiniLM package")
def test_minilm_tokenizes_every_sentence_within_its_length():
    task = data.make_task(0, 200, 50)
    local = models.local_path("all-minilm-l6-v2")
    tok = data.tokenize(*task.train, 32, 30522, local, "all-minilm-l6-v2")
    ids, mask = tok.padded()
    assert ids.shape == (200, 32) and ids.dtype == np.int32 and len(tok) == 200
    assert (mask.sum(axis=1) == tok.lengths).all() and tok.lengths.max() < 32  # no cut
    assert (ids[mask == 0] == tok.pad_id).all() and (tok.labels == task.train[1]).all()
    assert tok.tokenizer == "all-minilm-l6-v2's tokenizer"
    assert (ids[:, 0] == 101).all() and (tok.tokens != tok.pad_id).all()  # [CLS]; no padding


def test_the_fixed_table_stays_inside_the_vocabulary():
    task = data.make_task(0, 100, 10)
    tok = data.tokenize(*task.train, 16, 1000, None)
    words = len(data.SLOTS) * 2
    assert (tok.lengths == words + 2).all()  # [CLS], the words, [SEP]
    ids, _ = tok.padded()
    assert ids.max() < 1000 and (ids[:, 0] == 1).all()
    # one id per word: the ids decide the label as the words do
    assert len({data.word_id(w, 1000) for w in data.WORDS}) == len(data.WORDS)
    assert tok.tokenizer == "fixed word table"
    with pytest.raises(ValueError, match="more than seq_len 8"):  # refused, not cut
        data.tokenize(*task.train, 8, 1000, None)
    with pytest.raises(ValueError, match="no room for"):
        data.tokenize(*task.train, 16, 100, None)
