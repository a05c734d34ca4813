"""Summarization: CNN/DailyMail, XSum, Multi-News, scored by ROUGE (metrics.py, scorer.py)."""

from pathlib import Path

from lightning_bench.tasks.summarization import definitions, reader, scorer
from lightning_bench.tasks.definition import Suite

READERS = {
    "cnn_dailymail": reader.CNN_DAILYMAIL,
    "xsum": reader.XSUM,
    "multi_news": reader.MULTI_NEWS,
}
# what a missing file of each format should have been
EXPECTED_FILES = {
    "cnn_dailymail": ("CNN/DailyMail: a url list with its .story files (cnn_stories/), a .story file, or hub rows "
                      "as .jsonl"),
    "xsum": "XSum: H2O's prompt .jsonl or the hub's .json rows (document, summary, id)",
    "multi_news": "Multi-News' own line files (<split>.src with |||||-joined articles, <split>.tgt beside it)",
}
SUITE = Suite(definitions.TASKS, definitions.BENCHMARKS, readers=READERS, layout=Path(__file__).with_name("layout.yaml"),
              scorers=scorer.SCORERS, expected_files=EXPECTED_FILES)
