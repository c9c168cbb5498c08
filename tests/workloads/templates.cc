// C++ workload: templates, inlining, a namespace, a lambda, std::sort and std::map, built with
// -O2 -fno-omit-frame-pointer -g, so the hot frames are template instances and inlined calls.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace tpl {

static volatile unsigned long sink;

// Horner's rule; small enough that -O2 inlines it into its callers.
template <typename T, int N>
struct Poly {
    static inline T eval(T x) {
        T r = 1;
        for (int i = 0; i < N; i++) r = r * x + T(i + 1);
        return r;
    }
};

template <typename T>
__attribute__((noinline)) T sum_poly(const std::vector<T>& v) {
    T s = 0;
    for (const T& x : v) s += Poly<T, 7>::eval(x);
    return s;
}

template <typename T>
inline T mix(T a, T b) {
    return (a ^ (b << 7)) + (b >> 3);
}

template <typename T>
__attribute__((noinline)) T hash_all(const std::vector<T>& v) {
    T h = 0;
    for (int round = 0; round < 8; round++)
        for (const T& x : v) h = mix(h, x + T(round));
    return h;
}

struct Sorter {
    __attribute__((noinline)) void sort_desc(std::vector<int>& v) {
        std::sort(v.begin(), v.end(), [](int a, int b) { return a > b; });
    }
};

__attribute__((noinline)) unsigned long count_words(int n) {
    std::map<std::string, int> m;
    for (int i = 0; i < n; i++) m[std::to_string(i % 5000)] += i;
    return m.size();
}

__attribute__((noinline)) void run(int rounds) {
    std::vector<double> d(20000);
    std::vector<unsigned long> u(20000);
    std::vector<int> ints(20000);
    for (size_t i = 0; i < d.size(); i++) {
        d[i] = 1.0 / double(i + 1);
        u[i] = i * 2654435761u;
    }
    Sorter s;
    for (int r = 0; r < rounds; r++) {
        sink += (unsigned long)sum_poly(d);
        sink += hash_all(u);
        for (size_t i = 0; i < ints.size(); i++) ints[i] = int((i * 7919 + r) % 100003);
        s.sort_desc(ints);
        if (r % 8 == 0) sink += count_words(20000);
    }
}

}  // namespace tpl

int main(int argc, char** argv) {
    tpl::run(argc > 1 ? std::atoi(argv[1]) : 200);
    return 0;
}
