"""Print the headline figures of `*_downstream.json` records: python benchmarks/summarize_downstream.py FILE..."""

import json
import sys


def main(paths):
    for path in paths:
        record = json.load(open(path))
        print(f"== {path} ({record['model']})")
        for name, entry in record.items():
            if name in ("model", "runs", "note"):
                continue
            if "tasks" in entry:
                for task, t in entry["tasks"].items():
                    metrics = ", ".join(f"{k} {v:.4f}" for k, v in t["metrics"].items() if v is not None)
                    print(f"  {name}/{task}: score {t['score']:.4f} (n={t['num_samples']}; {metrics})")
                print(f"  {name} average over {len(entry['average_over'])} tasks: {entry['average']:.4f}")
            elif name == "mmlu":
                cats = ", ".join(f"{k} {v:.4f}" for k, v in entry["category_scores"].items())
                print(f"  mmlu: accuracy {entry['accuracy']:.4f} (n={entry['num_questions']}, "
                      f"{entry['num_subjects_evaluated']} subjects; macro {entry['macro_accuracy']:.4f}; "
                      f"acc_norm {entry['accuracy_norm']:.4f}; {cats})")
            else:
                print(f"  {name}: " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                             for k, v in entry.items() if k != "run"))


if __name__ == "__main__":
    main(sys.argv[1:])
