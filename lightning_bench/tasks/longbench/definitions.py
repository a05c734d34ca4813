"""LongBench (Bai et al., 2024): the 21 tasks of LongBench v1 (`longbench/<task>`), the 13 of LongBench-E
(`longbench_e/<task>`: the same tasks resampled evenly over lengths, scored per length bucket too) and
LongBench v2 (`longbench_v2`: 503 four-way multiple-choice questions over 8k-2M-word contexts).

Prompts are the official ones, zero-shot, each task's template of config/dataset2prompt.json (the few-shot
tasks trec/triviaqa/samsum/lsht carry their examples inside `context`), filled with the row's `context`
and `input`; the maximum answer lengths are config/dataset2maxlen.json's. The official pred.py wraps every
prompt in the model's chat template except those of trec, triviaqa, samsum, lsht, lcc and repobench-p
(`chat` here), and generates greedily with no stop string (samsum: also stopping at a newline, which the
scorer's first-line rule makes equivalent). Too long a prompt loses the middle of its `context` (the
official script cuts the middle of the whole prompt; cutting only the document never drops the question,
and lets the downstream driver compress the context before the question). Scored by the official per-task
metrics (tasks/longbench/scorer.py). Files: tasks/longbench/reader.py;
hub: THUDM/LongBench configs <task> and <task>_e (split "test").

LongBench v2 uses the official 0-shot prompt (prompts/0shot.txt): the context between <text> tags, the
question, the four choices, and the request to answer "The correct answer is (insert answer here)", of
which the scorer parses the letter; 128 new tokens, as pred.py's non-CoT run (which samples at
temperature 0.1; greedy here). Hub: THUDM/LongBench-v2 (its only split is "train").
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, GenerationSettings, Source, Splits, TaskDefinition

# config/dataset2prompt.json (THUDM/LongBench): {context} is the document, {input} the question / query
PROMPTS = {
    "narrativeqa": "You are given a story, which can be either a novel or a movie script, and a question. Answer the "
                   "question as concisely as you can, using a single phrase if possible. Do not provide any "
                   "explanation.\n\nStory: {context}\n\nNow, answer the question based on the story as concisely as "
                   "you can, using a single phrase if possible. Do not provide any explanation.\n\nQuestion: "
                   "{input}\n\nAnswer:",
    "qasper": "You are given a scientific article and a question. Answer the question as concisely as you can, using "
              "a single phrase or sentence if possible. If the question cannot be answered based on the information "
              "in the article, write \"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", "
              "or \"unanswerable\". Do not provide any explanation.\n\nArticle: {context}\n\n Answer the question "
              "based on the above article as concisely as you can, using a single phrase or sentence if possible. If "
              "the question cannot be answered based on the information in the article, write \"unanswerable\". If "
              "the question is a yes/no question, answer \"yes\", \"no\", or \"unanswerable\". Do not provide any "
              "explanation.\n\nQuestion: {input}\n\nAnswer:",
    "multifieldqa_en": "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question "
                       "based on the above text, only give me the answer and do not output any other words.\n\n"
                       "Question: {input}\nAnswer:",
    "multifieldqa_zh": "阅读以下文字并用中文简短回答：\n\n{context}\n\n现在请基于上面的文章回答下面的问题，只告诉我答案，不要输出任何其他字词。"
                       "\n\n问题：{input}\n回答：",
    "hotpotqa": "Answer the question based on the given passages. Only give me the answer and do not output any other "
                "words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given "
                "passages. Only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:",
    "dureader": "请基于给定的文章回答下述问题。\n\n文章：{context}\n\n请基于上述文章回答下面的问题。\n\n问题：{input}\n回答：",
    "gov_report": "You are given a report by a government agency. Write a one-page summary of the report.\n\n"
                  "Report:\n{context}\n\nNow, write a one-page summary of the report.\n\nSummary:",
    "qmsum": "You are given a meeting transcript and a query containing a question or instruction. Answer the query in "
             "one or more sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the above meeting "
             "transcript in one or more sentences.\n\nQuery: {input}\nAnswer:",
    "multi_news": "You are given several news passages. Write a one-page summary of all news. \n\nNews:\n{context}\n\n"
                  "Now, write a one-page summary of all the news.\n\nSummary:",
    "vcsum": "下面有一段会议记录，请你阅读后，写一段总结，总结会议的内容。\n会议记录：\n{context}\n\n会议总结：",
    "trec": "Please determine the type of the question below. Here are some examples of questions.\n\n{context}\n"
            "{input}",
    "triviaqa": "Answer the question based on the given passage. Only give me the answer and do not output any other "
                "words. The following are some examples.\n\n{context}\n\n{input}",
    "samsum": "Summarize the dialogue into a few short sentences. The following are some examples.\n\n{context}\n\n"
              "{input}",
    "lsht": "请判断给定新闻的类别，下面是一些例子。\n\n{context}\n{input}",
    "passage_count": "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please "
                     "carefully read these paragraphs and determine how many unique paragraphs there are after "
                     "removing duplicates. In other words, how many non-repeating paragraphs are there in total?\n\n"
                     "{context}\n\nPlease enter the final count of unique paragraphs after removing duplicates. The "
                     "output format should only contain the number, such as 1, 2, 3, and so on.\n\nThe final answer "
                     "is: ",
    "passage_retrieval_en": "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which "
                            "paragraph the abstract is from.\n\n{context}\n\nThe following is an abstract.\n\n{input}"
                            "\n\nPlease enter the number of the paragraph that the abstract is from. The answer format "
                            "must be like \"Paragraph 1\", \"Paragraph 2\", etc.\n\nThe answer is: ",
    "passage_retrieval_zh": "以下是若干段落文字，以及其中一个段落的摘要。请确定给定的摘要出自哪一段。\n\n{context}\n\n下面是一个摘要\n\n{input}\n\n"
                            "请输入摘要所属段落的编号。答案格式必须是\"段落1\"，\"段落2\"等格式\n\n答案是：",
    "lcc": "Please complete the code given below. \n{context}Next line of code:\n",
    "repobench-p": "Please complete the code given below. \n{context}{input}Next line of code:\n",
}
PROMPTS["2wikimqa"] = PROMPTS["musique"] = PROMPTS["hotpotqa"]  # the three multi-hop tasks share one prompt

# config/dataset2maxlen.json: new tokens per answer
MAX_NEW_TOKENS = {
    "narrativeqa": 128, "qasper": 128, "multifieldqa_en": 64, "multifieldqa_zh": 64, "hotpotqa": 32, "2wikimqa": 32,
    "musique": 32, "dureader": 128, "gov_report": 512, "qmsum": 512, "multi_news": 512, "vcsum": 512, "trec": 64,
    "triviaqa": 32, "samsum": 128, "lsht": 64, "passage_count": 32, "passage_retrieval_en": 32,
    "passage_retrieval_zh": 32, "lcc": 64, "repobench-p": 64,
}

TASK_ORDER = ("narrativeqa", "qasper", "multifieldqa_en", "multifieldqa_zh", "hotpotqa", "2wikimqa", "musique",
              "dureader", "gov_report", "qmsum", "multi_news", "vcsum", "trec", "triviaqa", "samsum", "lsht",
              "passage_count", "passage_retrieval_en", "passage_retrieval_zh", "lcc", "repobench-p")
E_TASKS = ("qasper", "multifieldqa_en", "hotpotqa", "2wikimqa", "gov_report", "multi_news", "trec", "triviaqa",
           "samsum", "passage_count", "passage_retrieval_en", "lcc", "repobench-p")
NO_CHAT = ("trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p")  # pred.py builds no chat prompt for these
CODE = ("lcc", "repobench-p")  # the completion's indentation is part of the answer
TITLES = {
    "narrativeqa": "NarrativeQA", "qasper": "Qasper", "multifieldqa_en": "MultiFieldQA-en",
    "multifieldqa_zh": "MultiFieldQA-zh", "hotpotqa": "HotpotQA", "2wikimqa": "2WikiMultihopQA", "musique": "MuSiQue",
    "dureader": "DuReader", "gov_report": "GovReport", "qmsum": "QMSum", "multi_news": "Multi-News",
    "vcsum": "VCSUM", "trec": "TREC", "triviaqa": "TriviaQA", "samsum": "SAMSum", "lsht": "LSHT",
    "passage_count": "PassageCount", "passage_retrieval_en": "PassageRetrieval-en",
    "passage_retrieval_zh": "PassageRetrieval-zh", "lcc": "LCC", "repobench-p": "RepoBench-P",
}


def _prompt(dataset: str):
    template = PROMPTS[dataset]

    def prompt(r: dict) -> tuple:
        # as pred.py's prompt_format.format(**row): the values are inserted as they are, braces and all
        return template.format(context=r["context"], input=r["input"]), tuple(r["answers"])

    return prompt


def _task(dataset: str, benchmark: str) -> TaskDefinition:
    suffix = "_e" if benchmark == "longbench_e" else ""
    title = f"{'LongBench-E' if suffix else 'LongBench'} {TITLES[dataset]}"
    return TaskDefinition(
        name=f"{benchmark}/{dataset}", benchmark=benchmark, title=title,
        source=Source("THUDM/LongBench", f"{dataset}{suffix}", "longbench"), output_type="generate_until",
        template=_prompt(dataset), template_version=f"{benchmark}@1", scorer="longbench", headline="score",
        splits=Splits(eval="test", train=None, fewshot=None), answer_field="answers",
        generation=GenerationSettings(stop=(), max_new_tokens=MAX_NEW_TOKENS[dataset], document="context",
                                      keep_whitespace=dataset in CODE, chat=dataset not in NO_CHAT))


# prompts/0shot.txt (LongBench v2): $DOC$, $Q$ and $C_A$..$C_D$ filled with the stripped fields
V2_PROMPT = ("Please read the following text and answer the question below.\n\n<text>\n$DOC$\n</text>\n\n"
             "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$"
             "\n\nFormat your response as follows: \"The correct answer is (insert answer here)\".")


def v2_prompt(r: dict) -> tuple:
    filled = {"$Q$": r["question"], "$C_A$": r["choice_A"], "$C_B$": r["choice_B"], "$C_C$": r["choice_C"],
              "$C_D$": r["choice_D"]}
    head, _, tail = V2_PROMPT.partition("$DOC$")
    for key, value in filled.items():  # never substituted inside the document itself
        tail = tail.replace(key, value)
    return head + r["context"] + tail, (r["answer"],)


TASKS = tuple(_task(d, "longbench") for d in TASK_ORDER) + tuple(_task(d, "longbench_e") for d in E_TASKS) + (
    TaskDefinition(
        name="longbench_v2", benchmark="longbench_v2", title="LongBench v2",
        source=Source("THUDM/LongBench-v2", None, "longbench_v2"), output_type="generate_until",
        template=v2_prompt, template_version="longbench_v2@1", scorer="longbench_v2", headline="accuracy",
        splits=Splits(eval="train", train=None, fewshot=None), answer_field="answers",
        generation=GenerationSettings(stop=(), max_new_tokens=128, document="context", chat=True)),
)
BENCHMARKS = (
    Benchmark("longbench", "LongBench", tuple(f"longbench/{d}" for d in TASK_ORDER), "task_means",
              member="LongBench task"),
    Benchmark("longbench_e", "LongBench-E", tuple(f"longbench_e/{d}" for d in E_TASKS), "task_means",
              member="LongBench-E task"),
    Benchmark("longbench_v2", "LongBench v2", ("longbench_v2",), "single_task"),
)
