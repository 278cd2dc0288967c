// A name -> factory table filled at start-up by registration objects, so that new topology
// types, routing policies, workloads... plug in without editing a central switch (in the
// manner of Envoy's REGISTER_FACTORY and Click's EXPORT_ELEMENT).
//
// Usage, at namespace scope in the file that implements the factory:
//   const Registration<TopologyFactory> kFatTree("fat_tree", &BuildFatTree);
// and at the place of use:
//   const TopologyFactory* f = Registry<TopologyFactory>::Find("fat_tree");
//
// Thread safety: registrations happen only during static initialisation; afterwards the
// registry is immutable and may be read from any thread. There is one registry per Factory
// type. The library holding the registrations must be linked whole (dar_core is), or the
// linker drops the registration objects.
#ifndef DAR_CORE_REGISTRY_H_
#define DAR_CORE_REGISTRY_H_

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace dar {

template <typename Factory>
class Registry {
 public:
  // The factory registered under `name`, or null.
  static const Factory* Find(std::string_view name) {
    const auto& entries = Entries();
    auto it = entries.find(name);
    return it == entries.end() ? nullptr : &it->second;
  }

  // The registered names, ascending.
  static std::vector<std::string> Names() {
    std::vector<std::string> out;
    for (const auto& [name, factory] : Entries()) out.push_back(name);
    return out;
  }

 private:
  template <typename F>
  friend class Registration;

  static std::map<std::string, Factory, std::less<>>& Entries() {
    static auto* entries = new std::map<std::string, Factory, std::less<>>();
    return *entries;
  }
};

// Registers `factory` under `name` when constructed. Define instances at namespace scope only.
// REQUIRES: `name` is not registered yet for this Factory type (aborts otherwise).
template <typename Factory>
class Registration {
 public:
  Registration(std::string name, Factory factory) {
    auto [it, inserted] = Registry<Factory>::Entries().emplace(name, std::move(factory));
    if (!inserted) {
      std::fprintf(stderr, "dar: '%s' is registered twice\n", name.c_str());
      std::abort();
    }
  }
};

}  // namespace dar

#endif  // DAR_CORE_REGISTRY_H_
