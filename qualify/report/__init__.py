"""The one report model (``Run``, ``LevelResult``, ``Check``, ``Evidence``) and what is rendered from
it: report.md, the model card's validation section, charts, and the diff of two reports.
Never imports torch.
"""
