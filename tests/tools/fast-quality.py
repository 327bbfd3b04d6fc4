#!/usr/bin/env python3
"""What fast decoding gives up, measured on held-out prompts (issue 12).

For each option (exact, prefix cache, dual cache, threshold, factor, dual +
threshold) every prompt is generated greedily with `unmask-cli generate
--json`; the table gives the share of answer tokens equal to the exact
schedule's, the steps run, and the mean log-likelihood of the answers under
the full model (`unmask-cli score`, the same masks for every option).

Usage: fast-quality.py CLI MODEL HELD_OUT_TEXT [--prompts 50] [--prompt-length 32]
       [--gen-length 128] [--block-length 32] [--samples 32]
Not run by the test suite: it takes minutes. Needs only the standard library.
"""
import argparse, json, os, subprocess, sys, tempfile

OPTIONS = [
    ("exact", []),
    ("prefix", ["--cache", "prefix"]),
    ("dual", ["--cache", "dual"]),
    ("threshold 0.9", ["--threshold", "0.9"]),
    ("factor 1.0", ["--factor", "1.0"]),
    ("dual + threshold 0.9", ["--cache", "dual", "--threshold", "0.9"]),
]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli"); ap.add_argument("model"); ap.add_argument("held_out")
    ap.add_argument("--prompts", type=int, default=50)
    ap.add_argument("--prompt-length", type=int, default=32)
    ap.add_argument("--gen-length", type=int, default=128)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--samples", type=int, default=32)
    a = ap.parse_args()

    # Prompts: prompt-length-token windows spread evenly over the held-out
    # text (tokenized paragraph by paragraph, then joined).
    paras = [p.strip() for p in open(a.held_out, encoding="utf-8").read().split("\n\n") if p.strip()]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(paras, f)
        texts = f.name
    encoded = json.loads(run([a.cli, "tokenize", "-m", a.model, "--texts-file", texts, "--json"]))["ids"]
    os.unlink(texts)
    stream = [t for ids in encoded for t in ids]
    span = len(stream) - a.prompt_length
    if span < a.prompts:
        sys.exit("the held-out text has only %d tokens" % len(stream))
    prompts = [stream[i * span // a.prompts:i * span // a.prompts + a.prompt_length] for i in range(a.prompts)]

    base = ["--gen-length", str(a.gen_length), "--steps", str(a.gen_length),
            "--block-length", str(a.block_length), "--device", "cpu", "--json", "--no-live"]
    results = {}
    for name, extra in OPTIONS:
        gens = []
        for p in prompts:
            out = run([a.cli, "generate", "-m", a.model, "--ids", ",".join(map(str, p))] + base + extra)
            gens.append(json.loads(out))
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for g in gens:
                f.write(json.dumps({"prompt_ids": g["prompt_ids"], "ids": g["ids"]}) + "\n")
            path = f.name
        score = json.loads(run([a.cli, "score", "-m", a.model, "--generations", path,
                                "--samples", str(a.samples), "--json"]))
        os.unlink(path)
        results[name] = (gens, score)
        print("done: %s" % name, file=sys.stderr, flush=True)

    exact = results["exact"][0]
    print("| option | token agreement with exact | answers identical | mean steps | "
          "mean log-likelihood per token (± s.e.) |")
    print("|---|---|---|---|---|")
    for name, _ in OPTIONS:
        gens, score = results[name]
        same = sum(x == y for g, e in zip(gens, exact) for x, y in zip(g["ids"], e["ids"]))
        total = sum(len(e["ids"]) for e in exact)
        identical = sum(g["ids"] == e["ids"] for g, e in zip(gens, exact))
        steps = sum(g["steps"] if isinstance(g["steps"], int) else g["steps"]["run"] for g in gens) / len(gens)
        per = [r["per_token"] for r in score["results"]]
        mean = sum(per) / len(per)
        se = (sum((x - mean) ** 2 for x in per) / (len(per) - 1) / len(per)) ** 0.5
        print("| %s | %.1f %% | %d / %d | %.1f | %.4f ± %.4f |" % (
            name, 100.0 * same / total, identical, len(gens), steps, mean, se))


if __name__ == "__main__":
    main()
