"""Looking inside: the notes' worked examples step by step, parameter counts, attention
heatmaps of one sentence and the single-file HTML report."""

from .attention import Inspection, attention_job, inspect_sentence
from .explain import explain
from .info import describe, parameter_table
from .report import write_html_report
from .visualize import save_positional_plots, write_attention_figures

__all__ = [
    "Inspection", "attention_job", "describe", "explain", "inspect_sentence", "parameter_table",
    "save_positional_plots", "write_attention_figures", "write_html_report",
]  # fmt: skip
