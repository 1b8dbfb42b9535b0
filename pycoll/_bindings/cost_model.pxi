# The cost model as Python hands it over: None (the defaults) or a flat sequence of floats in the layout of
# pycoll.cost_model.CostModel.as_array(): alpha, beta, gamma, then latency_scale and bandwidth_scale, each indexed
# by algorithm id (the ids the cost model weighs, below PYCOLL_COST_MODEL_ALGOS). The inter-host terms are not in it: they keep pycoll_default_cost_model's values (`pycoll tune`
# measures one host). Included by the modules that pass a model to C (_comm, _sim).

COST_MODEL_LEN = 3 + 2 * PYCOLL_COST_MODEL_ALGOS


cdef int fill_cost_model(pycoll_cost_model_t *model, values) except -1:
    cdef int a
    pycoll_default_cost_model(model)
    if values is None:
        return 0
    flat = [float(v) for v in values]
    if len(flat) != COST_MODEL_LEN:
        raise ValueError(f"cost model: expected {COST_MODEL_LEN} values, got {len(flat)}")
    model.alpha_s, model.beta_s_per_byte, model.gamma_s_per_byte = flat[0], flat[1], flat[2]
    for a in range(<int>PYCOLL_COST_MODEL_ALGOS):
        model.latency_scale[a] = flat[3 + a]
        model.bandwidth_scale[a] = flat[3 + PYCOLL_COST_MODEL_ALGOS + a]
    return 0
