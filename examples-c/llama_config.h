/* llama_config.h: a LlamaForCausalLM config.json, read by llama_generate
 * and llama_train (include after hf_common.h). */
#ifndef LLAMA_CONFIG_H
#define LLAMA_CONFIG_H

typedef struct {
    double hidden, inter, layers, heads, kv_heads, head_dim, vocab, positions, eps, theta;
    char act[32], rope_type[32];
    int tied, attn_bias, mlp_bias, rope_scaling;
} Config;

/* config.json as LlamaConfig reads it, checked for sizes this code can run;
 * each program refuses the variants it does not implement. */
static Config llama_read_config(const char *path) {
    /* transformers' LlamaConfig defaults for the keys a file may leave out
     * (kv_heads and head_dim 0: derived below, as LlamaConfig derives them). */
    Config c = {.hidden = 4096, .inter = 11008, .layers = 32, .heads = 32, .vocab = 32000, .positions = 2048,
                .eps = 1e-6, .theta = 10000, .act = "silu", .rope_type = "default"};
    /* transformers 5 writes rope_parameters {rope_type, rope_theta}; earlier
     * versions rope_theta and rope_scaling at the top level. */
    ConfigKey rope[] = {{"rope_theta", .num = &c.theta}, {"rope_type", .str = c.rope_type, .str_cap = sizeof c.rope_type}};
    ConfigKey keys[] = {
        {"hidden_size", .num = &c.hidden}, {"intermediate_size", .num = &c.inter},
        {"num_hidden_layers", .num = &c.layers}, {"num_attention_heads", .num = &c.heads},
        {"num_key_value_heads", .num = &c.kv_heads}, {"head_dim", .num = &c.head_dim},
        {"vocab_size", .num = &c.vocab}, {"max_position_embeddings", .num = &c.positions},
        {"rms_norm_eps", .num = &c.eps}, {"rope_theta", .num = &c.theta},
        {"hidden_act", .str = c.act, .str_cap = sizeof c.act}, {"tie_word_embeddings", .flag = &c.tied},
        {"attention_bias", .flag = &c.attn_bias}, {"mlp_bias", .flag = &c.mlp_bias},
        {"rope_scaling", .present = &c.rope_scaling},
        {"rope_parameters", .obj = rope, .obj_n = sizeof rope / sizeof rope[0]}};
    read_config_keys(path, keys, sizeof keys / sizeof keys[0]);
    if (c.kv_heads == 0) c.kv_heads = c.heads;
    if (c.head_dim == 0 && whole(c.heads, 1, 1e7)) c.head_dim = floor(c.hidden / c.heads);
    double ints[] = {c.hidden, c.inter, c.layers, c.heads, c.kv_heads, c.head_dim, c.vocab, c.positions};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (!whole(ints[i], 1, 1e7)) config_fail(path, "a size is not a positive integer");
    if ((int64_t)c.heads % (int64_t)c.kv_heads)
        config_fail(path, "num_attention_heads is not a multiple of num_key_value_heads");
    if ((int64_t)c.head_dim % 2) config_fail(path, "head_dim is odd (rotary embeddings rotate pairs)");
    if (!(c.eps > 0) || !(c.theta > 0)) config_fail(path, "rms_norm_eps or rope_theta is not positive");
    return c;
}

#endif
