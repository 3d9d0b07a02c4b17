"""Looking inside: the notes' worked examples step by step, parameter counts, attention
heatmaps and the single-file HTML report."""

from .explain import explain
from .info import describe, parameter_table
from .report import write_html_report
from .visualize import save_positional_plots, write_attention_figures

__all__ = [
    "describe", "explain", "parameter_table", "save_positional_plots", "write_attention_figures",
    "write_html_report",
]  # fmt: skip
