"""The end-to-end training study's data: a sentence-level task made from a
fixed seed, learnable, and the same token ids for every framework.

No hub at run time, and no data set a package ships with a licence that
allows this use was at hand, so the task is generated: two topics (ships and
cooking, say), each sentence a template filled with content words, most of
them from the sentence's own topic and the rest from the other. Its label is
the topic with more content words in it: a deterministic function of the
words, so a model can reach 100% on the held-out split, and a sentence whose
words are mixed is harder than one whose words agree, so accuracy climbs over
the run instead of jumping at the first evaluation. A pretrained sentence
encoder (``all-minilm-l6-v2``) learns it in a few hundred examples; a model
at random init (the smoke profile's) in a few thousand.

The text is tokenized once, by the model's real tokenizer where the model has
one (its package ships ``tokenizer.json``), else by a fixed word-to-id table
inside the model's vocabulary (a zoo model at random init): every framework
then reads the same tokens and labels (``pipeline.Examples``), and its input
pipelines only order, pad, batch and move them.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ...pipeline import Examples

# Content words per topic: nouns, verbs, adjectives. Disjoint, so a word's topic
# is never in doubt; of equal counts, so neither topic is easier to spot.
TOPICS = {
    "sea": (("ship", "harbour", "sailor", "anchor", "wave", "captain", "deck", "tide",
             "lighthouse", "mast", "crew", "island"),
            ("sails", "drifts", "docks", "rows", "navigates", "anchors", "steers", "floats"),
            ("salty", "stormy", "coastal", "nautical", "windy", "foggy", "tidal", "marine")),
    "kitchen": (("oven", "recipe", "chef", "spoon", "bread", "soup", "kettle", "garlic",
                 "pantry", "dough", "butter", "skillet"),
                ("bakes", "stirs", "simmers", "chops", "roasts", "whisks", "seasons", "slices"),
                ("crispy", "savory", "spicy", "tender", "buttery", "fragrant", "golden",
                 "sweet")),
}
# Words of no topic between the content words.
FILLERS = ("the", "a", "near", "with", "after", "before", "and", "then", "slowly",
           "quietly", "every", "morning", "again", "beside", "under", "over")
# A sentence's content-word slots: noun, verb, adjective, noun, adjective. An odd
# count: between two topics a majority always exists.
SLOTS = (0, 1, 2, 0, 2)


@dataclass(frozen=True)
class Task:
    """The generated sentences and labels: ``train`` and ``eval`` splits,
    each (texts, labels)."""

    train: tuple[list[str], np.ndarray]
    eval: tuple[list[str], np.ndarray]
    seed: int
    own_share: float


def sentence(rng: np.random.Generator, topic: int, own_share: float) -> tuple[str, int]:
    """One sentence of ``topic`` (an index of ``TOPICS``): each content word
    from its own topic with probability ``own_share``, else from the other;
    fillers between. Returns the text and its label, the topic with more
    content words (five slots and two topics: never a tie)."""
    names = list(TOPICS)
    words, counts = [], [0] * len(names)
    for slot in SLOTS:
        if rng.random() < own_share:
            t = topic
        else:  # another topic than its own, uniformly
            other = int(rng.integers(len(names) - 1))
            t = other + (other >= topic)
        choices = TOPICS[names[t]][slot]
        words.append(FILLERS[int(rng.integers(len(FILLERS)))])
        words.append(choices[int(rng.integers(len(choices)))])
        counts[t] += 1
    return " ".join(words) + ".", counts.index(max(counts))


def make_task(seed: int, n_train: int, n_eval: int, own_share: float = 0.7) -> Task:
    """``n_train`` and ``n_eval`` sentences from ``seed`` (the two splits
    from streams of their own: a larger train split keeps the same eval
    split), topics drawn evenly."""
    if not 0.5 < own_share <= 1.0:
        raise ValueError(f"own_share must be in (0.5, 1], got {own_share!r}")

    def split(stream: int, n: int):
        rng = np.random.default_rng([seed, stream])
        pairs = [sentence(rng, int(rng.integers(len(TOPICS))), own_share) for _ in range(n)]
        return [t for t, _ in pairs], np.array([y for _, y in pairs], dtype=np.int64)

    return Task(split(0, n_train), split(1, n_eval), seed, own_share)


def word_id(word: str, vocab: int) -> int:
    """A word's id in the fixed table: a stable hash into the vocabulary,
    above its first 1000 ids (the special and reserved tokens of BERT-like
    vocabularies)."""
    low = min(1000, vocab // 2)
    h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
    return low + h % (vocab - low)


def tokenize(texts: list[str], labels: np.ndarray, seq_len: int, vocab: int,
             tokenizer_dir=None, model: str = "", seed: int = 0) -> Examples:
    """``texts`` as examples of at most ``seq_len`` tokens (``pipeline.Examples``,
    their epochs ordered from ``seed``): with ``model``'s tokenizer in
    ``tokenizer_dir`` (transformers' AutoTokenizer, local files only), or,
    without one, ``[CLS]``-like 1, the words' ``word_id``, ``[SEP]``-like 2."""
    if tokenizer_dir is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
        enc = tok(texts, truncation=True, max_length=seq_len, padding="max_length",
                  return_tensors="np")
        ids, mask = enc["input_ids"], enc["attention_mask"]
        pad, how = int(tok.pad_token_id or 0), f"{model or tokenizer_dir}'s tokenizer"
    else:
        ids = np.zeros((len(texts), seq_len), dtype=np.int32)
        mask = np.zeros_like(ids)
        for i, text in enumerate(texts):
            row = [1, *(word_id(w, vocab) for w in text.rstrip(".").split()), 2][:seq_len]
            ids[i, :len(row)], mask[i, :len(row)] = row, 1
        pad, how = 0, "fixed word table"
    return Examples.from_padded(ids, mask, labels, pad_id=pad, seed=seed, tokenizer=how)
