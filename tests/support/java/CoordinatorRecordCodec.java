// Kafka's own codec of a coordinator's records, for the tests (run from source:
// `java -cp '<kafka libs>/*' CoordinatorRecordCodec.java group|share`): the group
// coordinator's (__consumer_offsets) or the share coordinator's (__share_group_state). Each
// line on stdin is "<key hex> <value hex, or - for a tombstone>"; each line out is a JSON
// object with Kafka's JSON of the key and the value as it decodes them, and the bytes Kafka
// writes for the same record ("keyHex", "valueHex"), so a test can check our encoding byte
// for byte.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.util.HexFormat;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecord;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecordSerde;
import org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde;
import org.apache.kafka.coordinator.share.ShareCoordinatorRecordSerde;

public class CoordinatorRecordCodec {
    public static void main(String[] args) throws Exception {
        String kind = args[0];
        CoordinatorRecordSerde serde = kind.equals("share")
            ? new ShareCoordinatorRecordSerde() : new GroupCoordinatorRecordSerde();
        Class<?> json = Class.forName(
            "org.apache.kafka.coordinator." + kind + ".generated.CoordinatorRecordJsonConverters");
        Method keyAsJson = json.getMethod("writeRecordKeyAsJson", ApiMessage.class);
        Method valueAsJson = json.getMethod("writeRecordValueAsJson", ApiMessage.class, short.class);
        ObjectMapper mapper = new ObjectMapper();
        HexFormat hex = HexFormat.of();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] parts = line.trim().split(" ");
            ByteBuffer key = ByteBuffer.wrap(hex.parseHex(parts[0]));
            ByteBuffer value = parts[1].equals("-") ? null : ByteBuffer.wrap(hex.parseHex(parts[1]));
            CoordinatorRecord record = serde.deserialize(key, value);
            ObjectNode out = mapper.createObjectNode();
            out.set("key", (JsonNode) keyAsJson.invoke(null, record.key()));
            if (record.value() == null) {
                out.set("value", NullNode.instance);
            } else {
                out.set("value", (JsonNode) valueAsJson.invoke(
                    null, record.value().message(), record.value().version()));
                out.put("valueHex", hex.formatHex(serde.serializeValue(record)));
            }
            out.put("keyHex", hex.formatHex(serde.serializeKey(record)));
            System.out.println(out);
        }
    }
}
