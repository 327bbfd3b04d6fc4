# bpe.py — the Brown corpus as plain text, and a byte-level BPE tokenizer
# trained on it, written as a Hugging Face tokenizer.json in the layout the
# engine loads (LLaDA's split regex, ByteLevel, special tokens at the end).
# Build-time tool only; the app never runs Python.
import json
import os
import re
from collections import Counter, defaultdict

import regex

SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|mdm_mask|>",
            "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def bytes_to_unicode():
    """GPT-2's printable stand-ins for the 256 byte values (ByteLevel)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


B2U = bytes_to_unicode()


def untag(sentence):
    """One Brown sentence ('word/tag word/tag ...') as ordinary text."""
    words = []
    for tok in sentence.split():
        w = tok.rsplit("/", 1)[0]
        words.append({"``": '"', "''": '"'}.get(w, w))
    text = " ".join(words)
    # Punctuation sits against the word before it, quotes against the words
    # inside them, as printed text has it.
    text = re.sub(r" ([.,;:!?)\]}])", r"\1", text)
    text = re.sub(r"([(\[{$]) ", r"\1", text)
    text = re.sub(r'" ([^"]*?) "', r'"\1"', text)
    text = re.sub(r" (n't|'s|'re|'ve|'m|'ll|'d)\b", r"\1", text)
    text = text.replace(" --", " —").replace("-- ", "— ")
    return text


def load_brown(folder):
    """Documents of the Brown corpus (500 files), each a list of paragraphs."""
    docs = []
    for name in sorted(os.listdir(folder)):
        if not re.fullmatch(r"c[a-r]\d\d", name):
            continue
        with open(os.path.join(folder, name), encoding="latin-1") as f:
            raw = f.read()
        # A blank line separates sentences; a tab starts each one.
        sents = [untag(s) for s in raw.split("\n") if s.strip()]
        # Group sentences into paragraphs of about five, so the model sees
        # newlines as well as running text.
        paras = [" ".join(sents[i:i + 5]) for i in range(0, len(sents), 5)]
        docs.append("\n".join(paras))
    return docs


def pretokenize(text):
    return regex.findall(SPLIT, text)


def train(texts, vocab_size):
    """Byte-level BPE: the most frequent adjacent pair merged, repeatedly,
    with pair counts updated incrementally (only the words that contain the
    merged pair change)."""
    n_merges = vocab_size - len(SPECIALS) - 256
    word_counts = Counter()
    for t in texts:
        for w in pretokenize(t):
            word_counts["".join(B2U[b] for b in w.encode("utf-8"))] += 1
    words = [list(w) for w in word_counts]
    freqs = list(word_counts.values())
    pairs = Counter()
    where = defaultdict(set)
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pairs[(a, b)] += freqs[i]
            where[(a, b)].add(i)
    merges = []
    for _ in range(n_merges):
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pairs[best] < 2:
            break
        merges.append(best)
        a, b = best
        merged = a + b
        for i in list(where[best]):
            w = words[i]
            f = freqs[i]
            for p in zip(w, w[1:]):
                pairs[p] -= f
                if pairs[p] <= 0:
                    del pairs[p]
            j, out = 0, []
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(merged)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for p in zip(out, out[1:]):
                pairs[p] += f
                where[p].add(i)
        where.pop(best, None)
    vocab = {}
    for ch in sorted(B2U.values(), key=lambda c: ord(c)):
        vocab[ch] = len(vocab)
    for a, b in merges:
        vocab[a + b] = len(vocab)
    return vocab, merges


class Encoder:
    """The same BPE the engine applies: lowest-ranked merge first."""

    def __init__(self, vocab, merges):
        self.vocab = vocab
        self.ranks = {m: i for i, m in enumerate(merges)}
        self.cache = {}

    def word(self, w):
        if w in self.cache:
            return self.cache[w]
        sym = list("".join(B2U[b] for b in w.encode("utf-8")))
        while len(sym) > 1:
            best, rank = None, None
            for p in zip(sym, sym[1:]):
                r = self.ranks.get(p)
                if r is not None and (rank is None or r < rank):
                    best, rank = p, r
            if best is None:
                break
            out, j = [], 0
            while j < len(sym):
                if j + 1 < len(sym) and (sym[j], sym[j + 1]) == best:
                    out.append(sym[j] + sym[j + 1])
                    j += 2
                else:
                    out.append(sym[j])
                    j += 1
            sym = out
        ids = [self.vocab[s] for s in sym]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        ids = []
        for w in pretokenize(text):
            ids.extend(self.word(w))
        return ids


def write_tokenizer(folder, vocab, merges):
    first_special = len(vocab)
    added = [{"id": first_special + i, "content": c, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True} for i, c in enumerate(SPECIALS)]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    return {c: first_special + i for i, c in enumerate(SPECIALS)}
