def branch_grad(x):
    out, bprop = branch_fprop(x)
    dout = _rt.ones_like_value(out)
    _, d_x = bprop(dout)
    _t1 = _rt.input_grad(d_x, x)
    return _t1


def branch_fprop(x):
    # line 39: if x > 0.0:
    _t1 = x > 0.0
    _t2, bp = _rt.switch(_t1, branch_if39_true_fprop, branch_if39_false_fprop, x, where='<root>/tests/test_codegen_readable.py:39')
    [y] = _t2
    # line 43: return y * 2.0
    _t3 = y * 2.0
    def branch_bprop(dout):
        # grad of line 43: return y * 2.0
        _t4 = dout * 2.0
        d_y = _rt.sum_to(_t4, y)
        # grad of line 39: if x > 0.0:
        _t5 = _rt.getitem_grad(_t2, 0, d_y)
        env_switch, d_x, *_ = bp(_t5)
        _t6 = (env_switch, d_x)
        return _t6
    _t7 = (_t3, branch_bprop)
    return _t7


def branch_if39_true_fprop(x):
    # line 40: y = jnp.sin(x) * x
    _t1 = jnp.sin(x)
    y = _t1 * x
    _t2 = (y,)
    def branch_if39_true_bprop(dout):
        d_y = dout[0]
        # grad of line 40: y = jnp.sin(x) * x
        _t3 = d_y * x
        _t4 = _rt.sum_to(_t3, _t1)
        _t5 = d_y * _t1
        _t6 = _rt.sum_to(_t5, x)
        _t7 = jnp.cos(x)
        _t8 = _t4 * _t7
        d_x = _rt.add_grad(_t6, _t8)
        _t9 = (EMPTY_ENV, d_x)
        return _t9
    _t10 = (_t2, branch_if39_true_bprop)
    return _t10


def branch_if39_false_fprop(x):
    # line 42: y = jnp.cos(x)
    y = jnp.cos(x)
    _t1 = (y,)
    def branch_if39_false_bprop(dout):
        d_y = dout[0]
        # grad of line 42: y = jnp.cos(x)
        _t2 = jnp.sin(x)
        _t3 = -_t2
        d_x = d_y * _t3
        _t4 = (EMPTY_ENV, d_x)
        return _t4
    _t5 = (_t1, branch_if39_false_bprop)
    return _t5
