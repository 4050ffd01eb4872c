# Implicitly-defined neural networks for sequence labeling (Kazi & Thompson, ACL 2017):
# data -> training -> evaluation -> timing -> report. Run: snakemake --cores all
from snakemake.utils import min_version

min_version("9.0")


include: "workflow/rules/messages.smk"


# the project's config.yaml, beside this file, whatever --directory says: the base that
# --configfile and --config extend
configfile: PROJECT_CONFIG


# the description on top of Snakemake's own report (snakemake --report report.zip), whose
# results are the outputs the rules mark with report()
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/timing.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        rules.render_report.output,
        all_taggers(),
    default_target: True
