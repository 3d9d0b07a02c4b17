"""Looking inside: the notes' worked examples step by step, parameter counts, attention
heatmaps of one sentence, the single-file HTML report, the step-through view (one sentence
through the real model, step by step, as one offline HTML file or a page of the server); and
trained runs compared side by side (BLEU by sentence length, speed, size)."""

from .attention import Inspection, attention_job, inspect_sentence
from .compare import Comparison, compare_runs
from .compare_report import write_report
from .info import describe, parameter_table
from .report import write_html_report
from .step_page import step_through_job
from .trace import trace_sentence
from .visualize import save_positional_plots, write_attention_figures
from .worked_examples import explain

__all__ = [
    "Comparison", "Inspection", "attention_job", "compare_runs", "describe", "explain",
    "inspect_sentence", "parameter_table", "save_positional_plots", "step_through_job",
    "trace_sentence", "write_attention_figures", "write_html_report", "write_report",
]  # fmt: skip
