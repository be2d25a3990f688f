"""Where work runs, shared by the stages that can spread it over a Ray cluster (collect,
judge): the Ray options (:mod:`.options`) and access to the cluster (:mod:`.ray_cluster`:
importing Ray, the address check, node selection, telling a lost node from a bug).
"""
