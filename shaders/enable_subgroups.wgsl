// enable_subgroups.wgsl: included first by the kernels with a SUBGROUP variant. Tint (in a
// browser, where the engine sets BROWSER) needs `enable subgroups;` before subgroup
// operations; naga (natively) refuses the directive and takes them on the device's feature.
#ifdef SUBGROUP
#ifdef BROWSER
enable subgroups;
#endif
#endif
