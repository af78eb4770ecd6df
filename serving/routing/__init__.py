"""Deciding where a request runs: the request record (_request), its checks (_validation), the
chooser (_chooser: feasibility, then the bundle's rule), the decision (_decision), the hand-written
rule table (_rule_table), the timed stages of route() (_stages) and the Router (_router) that ties
them to a bundle. Public names are exported from `serving`."""
