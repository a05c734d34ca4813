"""Metric functions several benchmarks share, pure (predictions and references in, figures out):
classification (GLUE, SuperGLUE), squad (SQuAD's official EM/F1, also ReCoRD's, open QA's and the
bring-your-own rows'), open_qa (NQ-open / TriviaQA normalisation and EM/F1, also InfiniteBench's and
LongBench's QA), rouge (ROUGE as rouge-score computes it, also InfiniteBench's and ZeroSCROLLS'), bootstrap
(the mean and percentile-bootstrap 95% CI every figure carries). A metric only one benchmark uses lives in
that benchmark's folder (mmlu/metrics.py, multiwoz/metrics.py, code/metrics.py)."""
