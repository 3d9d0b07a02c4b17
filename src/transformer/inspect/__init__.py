"""Looking inside: the notes' worked examples step by step, parameter counts, attention
heatmaps of one sentence and the single-file HTML report; and trained runs compared side by
side (BLEU by sentence length, speed, size)."""

from .attention import Inspection, attention_job, inspect_sentence
from .compare import Comparison, compare_runs
from .compare_report import write_report
from .explain import explain
from .info import describe, parameter_table
from .report import write_html_report
from .visualize import save_positional_plots, write_attention_figures

__all__ = [
    "Comparison", "Inspection", "attention_job", "compare_runs", "describe", "explain",
    "inspect_sentence", "parameter_table", "save_positional_plots", "write_attention_figures",
    "write_html_report", "write_report",
]  # fmt: skip
