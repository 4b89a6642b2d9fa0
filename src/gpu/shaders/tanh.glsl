// tanh for the architectures' soft-capping and GELU. GLSL's tanh may be
// computed as a ratio of exponentials that overflows to NaN for large
// arguments on some drivers, so this one is written out: an odd polynomial
// near 0 (where 1 - exp(-2|x|) would lose digits), else 1 - 2t / (1 + t)
// with t = exp(-2|x|), which tends to 1 without overflow and, near +-1, is
// off from the exact value by little more than its own rounding: GELU's
// 1 + tanh(z) for negative z keeps the CPU's digits. Every step is precise,
// so it gives the same bits for every batch size.
float kvt_tanh(float x) {
    float ax = abs(x);
    precise float r;
    if (ax < 0.125) {
        precise float x2 = ax * ax;
        precise float p = fma(x2, -0.053968254, 0.13333334); // -17/315, 2/15
        p = fma(x2, p, -0.33333334);
        p = fma(x2, p, 1.0);
        r = ax * p;
    } else {
        precise float t = exp(-2.0 * ax);
        precise float den = 1.0 + t;
        precise float q = (2.0 * t) / den;
        r = 1.0 - q;
    }
    return x < 0.0 ? -r : r;
}
