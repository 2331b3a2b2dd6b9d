"""A long question and its follow-up, for prefill while typing (engine, UI and server tests)."""

from __future__ import annotations


QUESTION = ("I am planning a small vegetable garden behind my house. The plot gets about six hours of sun, "
            "the soil is heavy clay, and I live where summers are hot and dry. Which vegetables should I "
            "start with, how should I improve the soil before planting, and how often should I water in July? "
            "I also have a compost heap from last year, a rain barrel that holds about two hundred litres, and "
            "a neighbour who keeps chickens and offers me their manure every spring.")


FOLLOW_UP = ("And which of those would grow in pots on a balcony that faces north, given the cold winds we get "
             "here from October to April? The balcony is about four metres long and one metre deep, it has a "
             "glass railing, and I could fix a small shelf or a trellis to the wall if that would help.")
