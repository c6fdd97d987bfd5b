#include "ir/dim_math.h"

#include <algorithm>
#include <map>

#include "core/checked.h"

namespace anvil::ir {

namespace {

// factor * symbol_1^p_1 * ...
struct Monomial {
  int64_t factor = 1;
  std::map<std::string, int> powers;
};

std::optional<Monomial> monomial_of(const Dim& d) {
  Monomial m;
  if (d.is_known()) {
    m.factor = d.value;
    return m;
  }
  if (!d.is_symbol()) return std::nullopt;
  size_t start = 0;
  while (start <= d.symbol.size()) {
    size_t star = d.symbol.find('*', start);
    std::string part = d.symbol.substr(start, star == std::string::npos ? std::string::npos : star - start);
    if (part.empty()) return std::nullopt;
    if (std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) && part.size() < 18)
      m.factor *= std::stoll(part);
    else
      ++m.powers[part];
    if (star == std::string::npos) break;
    start = star + 1;
  }
  return m;
}

Dim dim_of(const Monomial& m) {
  std::string s;
  for (const auto& [symbol, power] : m.powers)
    for (int i = 0; i < power; ++i) s += (s.empty() ? "" : "*") + symbol;
  if (s.empty()) return Dim::known(m.factor);
  if (m.factor == 0) return Dim::known(0);
  if (m.factor != 1) s = std::to_string(m.factor) + "*" + s;
  return Dim::named(s);
}

}  // namespace

Dim dim_mul(const Dim& a, const Dim& b) {
  if (a.is_known() && a.value == 0) return a;
  if (b.is_known() && b.value == 0) return b;
  auto ma = monomial_of(a), mb = monomial_of(b);
  if (!ma || !mb) return Dim::unknown();
  auto factor = mul_overflow_free(ma->factor, mb->factor);
  if (!factor) return Dim::unknown();
  ma->factor = *factor;
  for (const auto& [symbol, power] : mb->powers) ma->powers[symbol] += power;
  return dim_of(*ma);
}

std::optional<Dim> dim_div(const Dim& a, const Dim& b) {
  auto ma = monomial_of(a), mb = monomial_of(b);
  if (!ma || !mb || mb->factor == 0 || ma->factor % mb->factor != 0) return std::nullopt;
  ma->factor /= mb->factor;
  for (const auto& [symbol, power] : mb->powers) {
    auto it = ma->powers.find(symbol);
    if (it == ma->powers.end() || it->second < power) return std::nullopt;
    if ((it->second -= power) == 0) ma->powers.erase(it);
  }
  return dim_of(*ma);
}

Dim dim_add(const Dim& a, const Dim& b) {
  if (a.is_known() && b.is_known()) {
    if (auto s = add_overflow_free(a.value, b.value)) return Dim::known(*s);
    return Dim::unknown();
  }
  if (a.is_known() && a.value == 0) return b;
  if (b.is_known() && b.value == 0) return a;
  return Dim::unknown();
}

Dim dim_sub(const Dim& a, const Dim& b) {
  if (a.is_known() && b.is_known() && a.value >= b.value) return Dim::known(a.value - b.value);
  if (a.is_symbol() && a == b) return Dim::known(0);  // one symbol is one size
  if (b.is_known() && b.value == 0) return a;
  return Dim::unknown();
}

Dim dims_product(const SymShape& dims) {
  Dim p = Dim::known(1);
  for (const Dim& d : dims) p = dim_mul(p, d);
  return p;
}

Dim dim_min(const Dim& s, int64_t n) {
  if (s.is_known()) return Dim::known(std::min(s.value, n));
  if (n == 0) return Dim::known(0);  // broadcasting s against it would not give s at s = 1
  if (!s.is_symbol() || s.symbol.find_first_of("*(),") != std::string::npos) return Dim::unknown();
  return Dim::named("min(" + s.symbol + "," + std::to_string(n) + ")");
}

bool is_min_of(const Dim& m, const Dim& s) {
  if (!m.is_symbol() || !s.is_symbol()) return false;
  const std::string head = "min(" + s.symbol + ",";
  if (m.symbol.size() <= head.size() + 1 || m.symbol.compare(0, head.size(), head) != 0 || m.symbol.back() != ')')
    return false;
  const std::string n = m.symbol.substr(head.size(), m.symbol.size() - head.size() - 1);
  return std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
}

SliceRange slice_range(int64_t dim, int64_t start, int64_t end, int64_t step) {
  SliceRange r;
  if (dim == 0) return r;
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    if (end > start) r.length = (end - start - 1) / step + 1;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    const int64_t back = step == INT64_MIN ? INT64_MAX : -step;
    if (start > end) r.length = (start - end - 1) / back + 1;
  }
  if (r.length > 0) r.first = start;
  return r;
}

}  // namespace anvil::ir
