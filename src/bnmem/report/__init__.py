"""The report stage: claims and verdicts, figures, report.md."""
