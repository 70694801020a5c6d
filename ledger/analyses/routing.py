"""Routing balance of one receipt per MoE layer, computed in DuckDB from the list layout.

Every figure follows DESIGN.md's definitions and is reduced in SQL over the per-(step, layer) rows of the
index's ``routing_steps`` table (:data:`ledger.store.routing.STEP_SUMMARY`, computed from the ``tokens`` /
``dropped`` lists when the receipt was indexed, without opening them into Python objects): a 58-layer,
256-expert receipt of 10,000 logged steps (148M counts) arrives in Python as 58 rows.
"""

from __future__ import annotations

import duckdb

from ledger.analyses.series import Columns, _numpy

LAYER_SUMMARY = """
WITH per AS ({per_step}),
dom AS (
    SELECT layer, dominant, count(*) AS hits,
           row_number() OVER (PARTITION BY layer ORDER BY count(*) DESC, dominant) AS pick
    FROM per GROUP BY layer, dominant
)
SELECT layer, count(*) AS intervals, max(experts) AS experts,
       avg(n_std / (n_sum / experts)) AS load_cv,
       avg(n_max / (n_sum / experts)) AS max_mean,
       avg(CASE WHEN n_sum > 0 AND experts > 1 THEN (ln(n_sum) - n_log_n / n_sum) / ln(experts) END) AS load_entropy,
       sum(d_sum) / nullif(sum(n_sum), 0) AS dropped_fraction,
       avg((c_sum - (n_sum - d_sum)) / nullif(c_sum, 0)) AS capacity_waste,
       avg(entropy) AS router_entropy,
       any_value(d.dominant) AS dominant_expert,
       any_value(d.hits) / count(*) AS dominant_frequency
FROM per JOIN (SELECT layer, dominant, hits FROM dom WHERE pick = 1) d USING (layer)
GROUP BY layer ORDER BY layer
"""


def layer_summaries(con: duckdb.DuckDBPyConnection, receipt_id: str, first_step: int = 0) -> Columns:
    """Per MoE layer, over the logged intervals from ``first_step`` on: intervals, experts, load_cv (mean of
    std(n)/mean(n)), max_mean (mean of max(n)/mean(n)), load_entropy (mean of -sum(q log q)/log E),
    dropped_fraction (sum(d)/sum(n)), capacity_waste (mean of sum(C - kept)/(E x C); NaN without a capacity),
    router_entropy (mean), dominant_expert (the expert most often the argmax of n) and dominant_frequency
    (the share of intervals in which it is; 1/E when nothing dominates)."""
    per_step = "SELECT * FROM routing_steps WHERE receipt_id = $1 AND step >= $2"
    return _numpy(con.execute(LAYER_SUMMARY.format(per_step=per_step), [receipt_id, first_step]).fetchnumpy())


__all__ = ["LAYER_SUMMARY", "layer_summaries"]
