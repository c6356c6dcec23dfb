"""The OpenAI-compatible wire's log-probabilities in each shape the engines return them."""

from __future__ import annotations

from specscope.openai_wire import TokenLogprob, content_items, token_logprobs


def test_chat_completions_and_sglangs_native_shape_read_alike():
    chat = {"choices": [{"logprobs": {"content": [
        {"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "a", "logprob": -0.1},
                                                         {"token": "b", "logprob": None}]},
        "not an item",  # kept in place, its figure unknown: positions stay aligned
        {"token": "c", "logprob": -9999.0, "top_logprobs": []}]}}]}
    assert token_logprobs(chat) == [TokenLogprob("a", -0.1, (("a", -0.1),)), TokenLogprob("", None, ()),
                                    TokenLogprob("c", -9999.0, ())]
    assert len(content_items(chat["choices"][0])) == 3
    completions = {"choices": [{"logprobs": {"tokens": ["x", "y"], "token_logprobs": [-0.5, None],
                                             "top_logprobs": [{"x": -0.5, "z": None}, None]}}]}
    assert token_logprobs(completions) == [TokenLogprob("x", -0.5, (("x", -0.5),)),
                                           TokenLogprob("y", None, ())]
    native = {"meta_info": {"output_token_logprobs": [[-0.2, 17, "x"], [None, 18, "y"]],
                            "output_top_logprobs": [[[-0.2, 17, "x"], [None, 4, "w"]], None]}}
    assert token_logprobs(native) == [TokenLogprob("17", -0.2, (("17", -0.2),)),
                                      TokenLogprob("18", None, ())]
    assert token_logprobs({"choices": [{"text": "no figures"}]}) == []
    assert content_items({"logprobs": None}) == [] and content_items("junk") == []
