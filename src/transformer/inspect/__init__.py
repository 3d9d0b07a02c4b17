"""Looking inside: the notes' worked examples step by step, parameter counts, attention
heatmaps of one sentence, the single-file HTML report, and the step-through view (one sentence
through the real model, step by step, as one offline HTML file or a page of the server)."""

from .attention import Inspection, attention_job, inspect_sentence
from .explain import explain
from .info import describe, parameter_table
from .report import write_html_report
from .step_page import step_through_job
from .trace import trace_sentence
from .visualize import save_positional_plots, write_attention_figures

__all__ = [
    "Inspection", "attention_job", "describe", "explain", "inspect_sentence", "parameter_table",
    "save_positional_plots", "step_through_job", "trace_sentence", "write_attention_figures",
    "write_html_report",
]  # fmt: skip
