#!/usr/bin/env python3
"""How the demo model writes at each temperature (issue 18 §3): the
measurement behind data/demo-model/generation_config.json.

Five prompts chosen before measuring (below, never changed after) are
generated at each temperature and schedule with `unmask-cli generate --json`
(every parameter given, so the model's own recommendation plays no part),
two seeds each above temperature 0. Per answer: its words (runs of
letters, lower-cased), the share of distinct words, the share of word
3-grams that repeat an earlier one, the share of words in a dictionary
(/usr/share/dict/words, Debian's wamerican) and the mean log-likelihood per
token under the model (`unmask-cli score`, the same masks for every answer;
repetitive text scores high, so it is no quality measure alone). The table
gives the means over answers, and the distinct words of the five seed-1
answers together.

Usage: demo-sampling.py CLI MODEL [--temperatures 0,0.3,...] [--schedules 128/128/32,...]
                         [--seeds 2] [--dict /usr/share/dict/words]
(schedules as gen_length/steps/block_length). Not run by the test suite:
it takes minutes. Standard library only.
"""
import argparse, json, os, re, subprocess, sys, tempfile

PROMPTS = [
    "The committee met on Tuesday to",
    "After the war, the farmers",
    "In the morning she walked to the",
    "The new school would",
    "He said that the government",
]
TEMPERATURES = "0,0.3,0.5,0.7,0.9,1.0"
# gen_length/steps/block_length: the app's default schedule.
SCHEDULES = "128/128/32"
WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
    return r.stdout


def words_of(text):
    return WORD.findall(text.lower())


def repeated_3grams(words):
    grams = [tuple(words[i:i + 3]) for i in range(len(words) - 2)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def in_dictionary(word, dictionary):
    return word in dictionary or (word.endswith("'s") and word[:-2] in dictionary)


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli"); ap.add_argument("model")
    ap.add_argument("--dict", default="/usr/share/dict/words")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--temperatures", default=TEMPERATURES)
    ap.add_argument("--schedules", default=SCHEDULES)
    ap.add_argument("--samples", type=int, default=32)
    a = ap.parse_args()

    dictionary = None
    if os.path.exists(a.dict):
        dictionary = {w.strip().lower() for w in open(a.dict, encoding="utf-8", errors="replace")}

    print("| temperature | steps | block | words per answer | distinct words | distinct (5 answers, seed 1) "
          "| repeated 3-grams | dictionary words | log-likelihood per token |")
    print("|---|---|---|---|---|---|---|---|---|")
    samples = {}
    temperatures = [float(t) for t in a.temperatures.split(",")]
    schedules = [tuple(int(x) for x in s.split("/")) for s in a.schedules.split(",")]
    for gen, steps, block in schedules:
        for t in temperatures:
            answers = []
            # Greedy decoding draws nothing: one seed says it all.
            for seed in range(1, (a.seeds if t > 0 else 1) + 1):
                for prompt in PROMPTS:
                    out = json.loads(run([a.cli, "generate", "-m", a.model, "--prompt", prompt,
                                          "--gen-length", str(gen), "--steps", str(steps),
                                          "--block-length", str(block), "--temperature", str(t),
                                          "--cfg-scale", "0", "--remasking", "low_confidence",
                                          "--seed", str(seed), "--device", "cpu", "--json", "--no-live"]))
                    answers.append((seed, out))
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump([o for _, o in answers], f)
                path = f.name
            scored = json.loads(run([a.cli, "score", "-m", a.model, "--generations", path,
                                     "--samples", str(a.samples), "--json"]))
            os.unlink(path)
            lls = [r["per_token"] for r in scored["results"]]
            per = [words_of(o["text"]) for _, o in answers]
            seed1 = [w for (s, _), ws in zip(answers, per) if s == 1 for w in ws]
            dict_share = (mean([mean([in_dictionary(w, dictionary) for w in ws]) for ws in per if ws])
                          if dictionary else float("nan"))
            print("| %g | %d | %d | %.0f | %.0f %% | %d / %d | %.0f %% | %.0f %% | %.3f |" % (
                t, steps, block, mean([len(ws) for ws in per]),
                100 * mean([len(set(ws)) / len(ws) for ws in per if ws]),
                len(set(seed1)), len(seed1),
                100 * mean([repeated_3grams(ws) for ws in per]),
                100 * dict_share, mean(lls)), flush=True)
            samples[(t, steps, block)] = answers[0][1]["text"]
    print()
    for (t, steps, block), text in samples.items():
        print("T %g, %d steps, block %d, “%s”: %s" % (t, steps, block, PROMPTS[0], " ".join(text.split())[:160]))


if __name__ == "__main__":
    main()
