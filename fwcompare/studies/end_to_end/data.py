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

from dataclasses import dataclass

import numpy as np

from ...core.pipeline import Examples

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


# A sentence's length in the fixed table's tokens: a filler before each content
# word, between [CLS]- and [SEP]-like ids (a real tokenizer takes at least as many).
TABLE_TOKENS = 2 * len(SLOTS) + 2
# Every word the sentences use, in a fixed order: the fixed table's ids.
WORDS = tuple(dict.fromkeys([w for parts in TOPICS.values() for words in parts for w in words]
                            + list(FILLERS)))


def word_id(word: str, vocab: int) -> int:
    """A word's id in the fixed table: its place in ``WORDS`` above the first
    ids of the vocabulary (the special and reserved tokens of BERT-like
    vocabularies: the first 1000, or half of a smaller one); no two words share
    one, so the words decide the label as the text does."""
    low = min(1000, vocab // 2)
    if low + len(WORDS) > vocab:
        raise ValueError(f"a vocabulary of {vocab} has no room for {len(WORDS)} words "
                         f"above id {low}")
    return low + WORDS.index(word)


def tokenize(texts: list[str], labels: np.ndarray, seq_len: int, vocab: int,
             tokenizer_dir=None, model: str = "", seed: int = 0) -> Examples:
    """``texts`` as examples of at most ``seq_len`` tokens (``pipeline.Examples``,
    their epochs ordered from ``seed``; a longer one is refused, not cut): with
    ``model``'s tokenizer in
    ``tokenizer_dir`` (transformers' AutoTokenizer, local files only), or,
    without one, ``[CLS]``-like 1, the words' ``word_id``, ``[SEP]``-like 2."""
    if tokenizer_dir is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
        enc = tok(texts, padding="max_length", max_length=seq_len, return_tensors="np")
        ids, mask = enc["input_ids"], enc["attention_mask"]
        if ids.shape[1] > seq_len:  # a cut sentence could lose the words that decide it
            raise ValueError(f"a sentence takes {ids.shape[1]} tokens of {model or 'the'} "
                             f"tokenizer, more than seq_len {seq_len}")
        pad, how = int(tok.pad_token_id or 0), f"{model or tokenizer_dir}'s tokenizer"
    else:
        ids = np.zeros((len(texts), seq_len), dtype=np.int32)
        mask = np.zeros_like(ids)
        for i, text in enumerate(texts):
            row = [1, *(word_id(w, vocab) for w in text.rstrip(".").split()), 2]
            if len(row) > seq_len:
                raise ValueError(f"a sentence takes {len(row)} tokens, more than seq_len "
                                 f"{seq_len}")
            ids[i, :len(row)], mask[i, :len(row)] = row, 1
        pad, how = 0, "fixed word table"
    return Examples.from_padded(ids, mask, labels, pad_id=pad, seed=seed, tokenizer=how)
