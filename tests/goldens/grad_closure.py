def closure_grad(x, y):
    out, bprop = closure_fprop(x, y)
    dout = _rt.ones_like_value(out)
    _, d_x, d_y = bprop(dout)
    _t1 = _rt.input_grad(d_x, x)
    _t2 = _rt.input_grad(d_y, y)
    _t3 = (_t1, _t2)
    return _t3


def closure_fprop(x, y):
    # line 61: a = jnp.sin(x)
    a = jnp.sin(x)
    def inner_fprop(t):
        # line 64: return t * a + y
        _t1 = t * a
        _t2 = _t1 + y
        def inner_bprop(dout):
            # grad of line 64: return t * a + y
            _t3 = _rt.sum_to(dout, _t1)
            _t4 = _rt.sum_to(dout, y, tail=True)
            _t5 = {'closure@60:y': _t4}
            _t6 = _t3 * a
            d_t = _rt.sum_to(_t6, t)
            _t7 = _t3 * t
            _t8 = _rt.sum_to(_t7, a)
            _t9 = {'closure@60:a': _t8}
            _t10 = _rt.add_grad(_t5, _t9)
            _t11 = (_t10, d_t)
            return _t11
        _t12 = (_t2, inner_bprop)
        return _t12
    # line 66: return inner(x) * inner(y)
    _t13, bp = inner_fprop(x)
    _t14, bp_1 = inner_fprop(y)
    _t15 = _t13 * _t14
    def closure_bprop(dout_1):
        # grad of line 66: return inner(x) * inner(y)
        _t16 = dout_1 * _t14
        _t17 = _rt.sum_to(_t16, _t13)
        _t18 = dout_1 * _t13
        _t19 = _rt.sum_to(_t18, _t14)
        env_inner, _t20 = bp_1(_t19)
        env_inner_1, _t21 = bp(_t17)
        _t22 = _rt.add_grad(env_inner, env_inner_1)
        d_a = _rt.env_get(_t22, 'closure@60:a', a)
        _t23 = _rt.env_del(_t22, 'closure@60:a')
        # grad of line 61: a = jnp.sin(x)
        _t24 = jnp.cos(x)
        _t25 = d_a * _t24
        # grad of line 60: def closure(x, y):
        d_x = _rt.add_grad(_t21, _t25)
        _t26 = _rt.env_get(_t23, 'closure@60:y', y)
        _t27 = _rt.env_del(_t23, 'closure@60:y')
        d_y = _rt.add_grad(_t20, _t26)
        _t28 = (_t27, d_x, d_y)
        return _t28
    _t29 = (_t15, closure_bprop)
    return _t29
