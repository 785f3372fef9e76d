"""Models shared by the saving tests and the fresh processes that load them."""
import keras

import opforge.layers


@keras.saving.register_keras_serializable(package="opforge_tests")
class SubclassedNet(keras.Model):
    def __init__(self, units: int = 16, slope: float = 0.25, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.slope = slope
        self.hidden = keras.layers.Dense(units)
        self.act = opforge.layers.LeakyReLU(negative_slope=slope)
        self.out = keras.layers.Dense(3)

    def call(self, x):
        return self.out(self.act(self.hidden(x)))

    def get_config(self):
        return {**super().get_config(), "units": self.units, "slope": self.slope}


def build(kind: str) -> keras.Model:
    keras.utils.set_random_seed(0)
    if kind == "sequential":
        return keras.Sequential(
            [keras.Input((8,)), keras.layers.Dense(16), opforge.layers.LeakyReLU(0.3), keras.layers.Dense(3)]
        )
    if kind == "functional":
        inputs = keras.Input((8,))
        h = opforge.layers.LeakyReLU(negative_slope=-0.2)(keras.layers.Dense(16)(inputs))
        return keras.Model(inputs, keras.layers.Dense(3)(h))
    model = SubclassedNet()
    model(keras.ops.zeros((1, 8)))
    return model
